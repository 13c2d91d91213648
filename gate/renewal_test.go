package gate

import (
	"context"
	"testing"
	"time"
)

// TestRenewalsFollowTheLimit: with no backend limited, or only idle ones,
// the lease is renewed at the lease's own need (a third of the TTL) and
// the worker stays in contact between renewals; demand on a limited
// backend brings the renewals back to every period at once, without
// counting as a rejoin; Renew has one sent and
// answered within a round trip.
func TestRenewalsFollowTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := startEtcd(t)
	// Twice the tests' TTL: its grace, a quarter of the TTL past a
	// renewal's slack, is then a second, which a renewal's round trip on
	// a loaded machine with -race came within (0.5 s failed once). A
	// slack that did not cover the spaced renewals shows at any TTL: the
	// gap, a third of it, is longer than the grace.
	w := startWorker(t, c.Endpoints(), WithTTL(2*testTTL))
	g := w.g
	span := 2 * g.ttl
	count := func() int64 {
		before := g.sent.Load()
		for end := time.Now().Add(span); time.Now().Before(end); time.Sleep(g.period / 4) {
			if g.Degraded() {
				t.Errorf("degraded in contact")
				return 0
			}
		}
		return g.sent.Load() - before
	}
	if n, most := count(), int64(span/(g.ttl/3-g.ttl/24))+1; n > most || n < 2 {
		t.Errorf("%d renewals in %v with no backend limited, want 2 to %d (one per third of the TTL)", n, span, most)
	}

	// A limited backend with no demand is idle: it holds no slot that
	// another worker could reclaim, so the renewals keep their spacing.
	g.Limiter("b").SetLimit(4)
	if !eventually(g.ttl, func() bool { return backendOf(w, "b").idle.Load() }) {
		t.Fatal("a limited backend without demand never went idle")
	}
	time.Sleep(g.ttl / 3) // the renewals sent at the switch are answered
	if n, most := count(), int64(span/(g.ttl/3-g.ttl/24))+1; n > most {
		t.Errorf("%d renewals in %v with an idle backend limited, want at most %d (one per third of the TTL)", n, span, most)
	}

	// Demand tightens them to every period, without counting as a rejoin.
	rejoins := g.rejoins.Load()
	ctx, cancel := context.WithTimeout(t.Context(), g.ttl)
	s, err := g.Limiter("b").Acquire(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if n, least := count(), int64(span/g.period)*3/4; n < least {
		t.Errorf("%d renewals in %v with a backend limited and in use, want at least %d (one per period)", n, span, least)
	}
	if r := g.rejoins.Load(); r != rejoins {
		t.Errorf("the demand counted %d rejoins, want none", r-rejoins)
	}
	s.Release()

	g.Limiter("b").SetLimit(0)
	time.Sleep(g.ttl / 2) // the renewal in flight at the switch is answered
	before := g.LastAnswer().At
	asked := time.Now()
	g.Renew()
	for g.LastAnswer().At.Equal(before) {
		if time.Since(asked) > g.ttl/4 {
			t.Fatalf("no answer within %v of Renew", g.ttl/4)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("Renew answered in %v", time.Since(asked).Round(time.Millisecond))
}
