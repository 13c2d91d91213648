package gateway

import (
	"fmt"
	"testing"
)

// A made id is the process's prefix and the 16 hex digits of its number,
// as fmt writes them.
func TestMakeRequestID(t *testing.T) {
	for _, n := range []uint64{0, 1, 0xab, 7<<32 | 9, 1<<63 | 5, ^uint64(0)} {
		id := makeRequestID(n)
		if got, want := string(id[:]), string(requestIDPrefix[:])+fmt.Sprintf("%016x", n); got != want {
			t.Errorf("%#x: got %s, want %s", n, got, want)
		}
	}
}
