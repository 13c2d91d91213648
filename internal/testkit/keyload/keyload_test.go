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
	if b.Surely != 2 || b.Refused != 2 || b.AtKill != -1 || b.Judged != 1 || b.Stalled != 0 {
		t.Fatalf("got %+v; want surely 2, refused with 2, none by a kill", b)
	}
	b = Windows(tries, time.Second, t0, at(3000), at(1200))
	if b.Refused != -1 || b.AtKill != 2 {
		t.Fatalf("with a kill at 1.2 s got %+v; want the refusal counted by the kill", b)
	}
}

// TestWindowsEndAtTheRefusal: a refusal is judged on the window that
// ended when it was decided, not on a later one that holds it; the
// later window below holds one admission, the one ending at the refusal
// two.
func TestWindowsEndAtTheRefusal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var tries []Try
	for ms := 0; ms < 3000; ms += 20 {
		tr := Try{Sent: at(ms), Answered: at(ms + 5), Status: 429}
		if ms == 1100 || ms == 1900 || ms == 2950 {
			tr.Status = 200
		}
		tries = append(tries, tr)
	}
	// A refusal decided at 2000-2005 ends a window holding the
	// admissions at 1100 and 1900; the windows starting after 1100 that
	// hold a refusal hold one admission.
	b := Windows(tries, time.Second, at(1000), at(2010), time.Time{})
	if b.Refused != 2 || b.RefusedAt != time.Second || b.Judged != 1 {
		t.Fatalf("got %+v; want the refusal sent at 2 s judged, with 2", b)
	}
}

// TestWindowsStall: a refusal whose window holds a stall in sending is
// not judged, and one whose every possible window holds too few is
// judged on the most of them.
func TestWindowsStall(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var tries []Try
	add := func(ms, took, status int) {
		tries = append(tries, Try{Sent: at(ms), Answered: at(ms + took), Status: status})
	}
	for ms := 0; ms < 4000; ms += 10 {
		switch {
		case ms >= 1500 && ms < 1800: // nothing sent: a stall
		case ms%100 == 0:
			add(ms, 5, 200)
		default:
			add(ms, 5, 429)
		}
	}
	b := Windows(tries, time.Second, t0, at(4000), time.Time{})
	// Every judged window holds 10 admissions; one that holds the stall
	// holds 7.
	if b.Refused != 10 {
		t.Errorf("got %+v; want the refusals judged with 10 each", b)
	}
	// From 1 s (a whole window into the span) 243 refusals: 181 of them,
	// sent between 1.49 s and 3.8 s, meet the stall (1.49 s to 1.8 s)
	// in their window or the one before.
	if b.Judged != 62 || b.Stalled != 181 {
		t.Errorf("got %d judged and %d stalled; want 62 and 181", b.Judged, b.Stalled)
	}
}
