package millis

import (
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	for d, want := range map[time.Duration]float64{
		0:                          0,
		time.Microsecond:           0.001,
		1500 * time.Microsecond:    1.5,
		2*time.Second + 999:        2000, // below a microsecond is dropped
		-3 * time.Millisecond:      -3,
		12345678 * time.Nanosecond: 12.345,
	} {
		if got := Of(d); got != want {
			t.Errorf("Of(%v) = %v, want %v", d, got, want)
		}
	}
}
