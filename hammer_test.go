package reconf

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestHammer runs thousands of reloads, successful and rejected, against
// concurrent readers and pinned workers. No reader may see fields of two
// generations (routing.a and routing.b are always written equal), IDs seen
// by any reader never go back, and a pinned configuration never changes
// under the work that holds it.
func TestHammer(t *testing.T) {
	reloads := 3000
	if testing.Short() {
		reloads = 300
	}
	src := newMem(baseYAML(0))
	var retiredMu sync.Mutex
	retired := map[uint64]int{}
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()),
		WithRetention(64),
		WithMutationObserver(func(m Mutation) { t.Errorf("generation %d modified at %v", m.Generation, m.Paths) }),
		WithRetireHook[testConfig](func(g *Generation[testConfig]) {
			retiredMu.Lock()
			retired[g.ID()]++
			retiredMu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
	}
	for range 4 {
		wg.Go(func() { // readers
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				g := rt.Current()
				c := g.Config()
				if c.Routing.A != c.Routing.B {
					fail("reader saw a=%d b=%d in generation %d", c.Routing.A, c.Routing.B, g.ID())
					return
				}
				if g.ID() < last {
					fail("generation went back from %d to %d", last, g.ID())
					return
				}
				last = g.ID()
				reads.Add(1)
			}
		})
	}
	for range 4 {
		wg.Go(func() { // pinned workers
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := rt.Acquire()
				a, id := p.Config().Routing.A, p.ID()
				if id < last {
					fail("pinned generation went back from %d to %d", last, id)
				}
				last = id
				for range 3 {
					time.Sleep(10 * time.Microsecond)
					if p.Config().Routing.A != a || p.Config().Routing.B != a || p.ID() != id {
						fail("pinned generation %d changed under its holder", id)
					}
				}
				p.Release()
			}
		})
	}
	published := 0
	for i := 1; i <= reloads; i++ {
		switch i % 4 {
		case 0:
			src.set(strings.Replace(baseYAML(i), "weight: 3", "weight: 3000", 1)) // invalid
		case 1:
			src.set(strings.Replace(baseYAML(i), "8080", "9090", 1)) // restart-required
		default:
			src.set(baseYAML(i))
		}
		res, err := rt.Reload(context.Background(), TriggerSDK)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case res.Outcome == Published:
			published++
		case res.Outcome == Invalid, res.Outcome == RestartRequired, res.Outcome == RetentionBlocked:
		default:
			t.Fatalf("reload %d: %s %s", i, res.Outcome, res.Message)
		}
	}
	close(stop)
	wg.Wait()
	if published < reloads/4 || reads.Load() == 0 {
		t.Fatalf("published %d of %d, %d reads", published, reloads, reads.Load())
	}
	if st := rt.Status(); st.Pinned != 0 || st.RetainedGenerations != 1 {
		t.Fatalf("after the hammer: %+v", st)
	}
	last := rt.Current().ID()
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	retiredMu.Lock()
	defer retiredMu.Unlock()
	for id := uint64(1); id <= last; id++ {
		if retired[id] != 1 {
			t.Fatalf("generation %d retired %d times", id, retired[id])
		}
	}
}

// TestLifecycleProperties checks, over random sequences of reload, acquire,
// release and close: generation IDs increase by one per publish, the
// retention budget is never exceeded, and every generation's retire hooks
// run exactly once (and only after its last pin).
func TestLifecycleProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		budget := rapid.IntRange(2, 5).Draw(rt, "budget")
		src := newMem(baseYAML(0))
		var mu sync.Mutex
		retiredCount := map[uint64]int{}
		r, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()),
			WithRetention(budget),
			WithRetireHook[testConfig](func(g *Generation[testConfig]) {
				mu.Lock()
				retiredCount[g.ID()]++
				mu.Unlock()
			}))
		if err != nil {
			rt.Fatal(err)
		}
		var pins []Pin[testConfig]
		wantID := uint64(1)
		marker, activeMarker := 0, 0
		steps := rapid.SliceOfN(rapid.IntRange(0, 3), 1, 60).Draw(rt, "steps")
		for _, s := range steps {
			switch s {
			case 0: // reload with a change
				marker++
				src.set(baseYAML(marker))
				res, _ := r.Reload(context.Background(), TriggerSDK)
				switch res.Outcome {
				case Published:
					wantID++
					activeMarker = marker
				case RetentionBlocked:
					if r.Status().RetainedGenerations < budget {
						rt.Fatalf("retention-blocked with %d of %d retained", r.Status().RetainedGenerations, budget)
					}
				default:
					rt.Fatalf("reload: %s", res.Outcome)
				}
				if r.Current().ID() != wantID {
					rt.Fatalf("generation %d, want %d", r.Current().ID(), wantID)
				}
			case 1:
				pins = append(pins, r.Acquire())
			case 2:
				if len(pins) > 0 {
					i := rapid.IntRange(0, len(pins)-1).Draw(rt, "pin")
					pins[i].Release()
					pins = append(pins[:i], pins[i+1:]...)
				}
			case 3:
				src.set(baseYAML(activeMarker))
				res, _ := r.Reload(context.Background(), TriggerSDK) // unchanged
				if res.Outcome != NoOp {
					rt.Fatalf("unchanged reload: %s", res.Outcome)
				}
			}
			if n := r.Status().RetainedGenerations; n > budget {
				rt.Fatalf("%d generations retained, budget %d", n, budget)
			}
			mu.Lock()
			for _, p := range pins {
				if retiredCount[p.ID()] != 0 {
					rt.Fatalf("generation %d retired while pinned", p.ID())
				}
			}
			mu.Unlock()
		}
		for _, p := range pins {
			p.Release()
		}
		if err := r.Close(context.Background()); err != nil {
			rt.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for id := uint64(1); id <= wantID; id++ {
			if retiredCount[id] != 1 {
				rt.Fatalf("generation %d retired %d times", id, retiredCount[id])
			}
		}
	})
}

// TestDiffAgreesWithEncoding checks the side-by-side diff against the
// canonical encoding: both must name exactly the same changed paths.
func TestDiffAgreesWithEncoding(t *testing.T) {
	names := []string{"stub", "other", "a", "b", "c"}
	gen := rapid.Custom(func(rt *rapid.T) *testConfig {
		c := &testConfig{}
		c.Server.Address = rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "addr")
		c.Routing.A = rapid.IntRange(0, 2).Draw(rt, "a")
		perm := rapid.Permutation(names).Draw(rt, "perm")
		for _, n := range perm[:rapid.IntRange(0, len(names)).Draw(rt, "n")] {
			b := testBackend{Name: n, Weight: rapid.IntRange(0, 2).Draw(rt, "w")}
			if rapid.Bool().Draw(rt, "key") {
				b.APIKey = NewSecret(rapid.SampledFrom([]string{"k1", "k2"}).Draw(rt, "k"))
			}
			c.Backends = append(c.Backends, b)
		}
		if rapid.Bool().Draw(rt, "aliases") {
			c.Aliases = map[string]string{}
			for _, n := range rapid.SliceOfDistinct(rapid.SampledFrom(names), rapid.ID[string]).Draw(rt, "alias") {
				c.Aliases["m-"+n] = rapid.SampledFrom(names).Draw(rt, "target")
			}
		}
		return c
	})
	rapid.Check(t, func(rt *rapid.T) {
		a, b := gen.Draw(rt, "a"), gen.Draw(rt, "b")
		got := diffOf(a, b)
		s := mustSchema(reflect.TypeFor[testConfig]())
		want := diffEntries(flatten(s, reflect.ValueOf(a).Elem()), flatten(s, reflect.ValueOf(b).Elem()))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			rt.Fatalf("Diff = %v\nencoding diff = %v", got, want)
		}
	})
}
