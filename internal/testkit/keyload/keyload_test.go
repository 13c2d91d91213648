package keyload

import (
	"testing"
	"time"
)

// TestWindows: the bounds of a window's admissions from the tries'
// intervals; refusals never count as admissions, and a window by the
// kill counts apart.
func TestWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tries := []Try{
		{Sent: at(0), Answered: at(10), Status: 200},
		{Sent: at(500), Answered: at(510), Status: 200},
		{Sent: at(990), Answered: at(1020), Status: 200}, // meets [0,1s) but is not wholly inside it
		{Sent: at(1500), Answered: at(1510), Status: 429},
		{Sent: at(1800), Answered: at(1810), Status: 200},
		{Sent: at(2500), Answered: at(2510), Status: 200},
	}
	b := Windows(tries, time.Second, t0, at(3000), time.Time{})
	if b.Surely != 2 || b.Refused != 1 || b.AtKill != -1 {
		t.Fatalf("got %+v; want surely 2, refused with 1, none by a kill", b)
	}
	b = Windows(tries, time.Second, t0, at(3000), at(1200))
	if b.Refused != -1 || b.AtKill != 1 {
		t.Fatalf("with a kill at 1.2 s got %+v; want the refusal counted by the kill", b)
	}
}
