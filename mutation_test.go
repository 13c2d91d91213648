package reconf

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// Mutation used to be silent unless a detector was switched on: now every
// runtime finds it, at the next attempt, with its paths, in the log, in
// Status and for observers.
func TestMutationIsDetectedByDefault(t *testing.T) {
	var log testkit.Buffer
	var got []Mutation
	src := newMem(baseYAML(1))
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv),
		WithLogger(slog.New(slog.NewTextHandler(&log, nil))),
		WithMutationObserver(func(m Mutation) { got = append(got, m) }))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	rt.Current().Config().Backends[1].Weight = 99 // the bug the detector exists for
	rt.Current().Config().Routing.MaxAttempts = 9
	mustReload(t, rt, Published) // the file differs from the modified generation

	st := rt.Status()
	if st.Mutations != 1 || st.LastMutation == nil {
		t.Fatalf("status: %d mutations, last %+v; want 1", st.Mutations, st.LastMutation)
	}
	m := *st.LastMutation
	want := []string{"backends[other].weight", "routing.max_attempts"}
	if m.Generation != 1 || m.FoundAt != "attempt" || m.PathCount != 2 || strings.Join(m.Paths, ",") != strings.Join(want, ",") {
		t.Fatalf("mutation = %+v, want generation 1 at attempt, paths %v", m, want)
	}
	if len(got) != 1 || got[0].Generation != 1 {
		t.Fatalf("observer got %+v", got)
	}
	line := log.String()
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "backends[other].weight") {
		t.Fatalf("log = %q, want an error naming the path", line)
	}
	// Reported once: the next attempt finds generation 2 intact.
	mustReload(t, rt, NoOp)
	if n := rt.Status().Mutations; n != 1 {
		t.Fatalf("mutations = %d after a second attempt, want 1", n)
	}
}

func TestMutationFoundAtRetire(t *testing.T) {
	var got []Mutation
	var mu sync.Mutex
	src := newMem(baseYAML(1))
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()),
		WithMutationObserver(func(m Mutation) { mu.Lock(); got = append(got, m); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	p := rt.Acquire()
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	p.Config().Aliases["new"] = "stub" // modifies generation 1 after it stopped being active
	p.Release()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].FoundAt != "retire" || got[0].Generation != 1 || strings.Join(got[0].Paths, ",") != "model_aliases[new]" {
		t.Fatalf("mutations = %+v, want generation 1 at retire, model_aliases[new]", got)
	}
}

// A write to the active generation while an attempt runs (here by a
// consumer, through Prepare's prev) is found by the attempt's own check,
// which runs just before the swap and stands for the retire check of a
// generation that no pin holds past it: one report, at the attempt.
func TestMutationDuringAttemptFoundAtSwap(t *testing.T) {
	var got []Mutation
	var mu sync.Mutex
	write := ConsumerFunc[testConfig](func(_ context.Context, prev, _ *testConfig) (Prepared, error) {
		if prev != nil { // nil for the first generation
			prev.Routing.MaxAttempts = 7 // the bug: prev is read-only
		}
		return nil, nil
	})
	src := newMem(baseYAML(1))
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()),
		WithConsumer(Key[any]("writer"), write, "routing"),
		WithMutationObserver(func(m Mutation) { mu.Lock(); got = append(got, m); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].FoundAt != "attempt" || got[0].Generation != 1 || strings.Join(got[0].Paths, ",") != "routing.max_attempts" {
		t.Fatalf("mutations = %+v, want one, generation 1 at attempt, routing.max_attempts", got)
	}
}

func TestMutationPanicMode(t *testing.T) {
	src := newMem(baseYAML(1))
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()),
		WithMutationCheck(MutationPanic))
	if err != nil {
		t.Fatal(err)
	}
	p := rt.Acquire()
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	p.Config().Routing.MaxAttempts = 7 // the bug
	got := panicText(p.Release)        // the last pin retires generation 1
	if !strings.Contains(got, "routing.max_attempts") {
		t.Fatalf("panic = %q, want the changed path", got)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestMutationOff(t *testing.T) {
	src := newMem(baseYAML(1))
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()),
		WithMutationCheck(MutationOff))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	rt.Current().Config().Routing.MaxAttempts = 9
	mustReload(t, rt, Published)
	if n := rt.Status().Mutations; n != 0 {
		t.Fatalf("mutations = %d with the detector off", n)
	}
}

// A type's own unexported state and yaml:"-" fields are not configuration:
// changing them is no mutation.
func TestDigestCoversDeclaredFieldsOnly(t *testing.T) {
	type inner struct {
		When  time.Time         `yaml:"when"`
		M     map[string][]int  `yaml:"m"`
		S     map[string]string `yaml:"s"`
		P     *int              `yaml:"p"`
		cache map[string]string //nolint:unused // internal state
		Memo  string            `yaml:"-"`
	}
	n := 1
	a := inner{When: time.Unix(5, 0), M: map[string][]int{"x": {1}, "y": {2, 3}}, S: map[string]string{"a": "b", "c": "d"}, P: &n}
	d := digestOf(&a)
	a.cache = map[string]string{"k": "v"}
	a.Memo = "memo"
	if digestOf(&a) != d {
		t.Fatal("digest changed with internal state")
	}
	for name, mutate := range map[string]func(*inner){
		"time":             func(x *inner) { x.When = x.When.Add(1) },
		"map value":        func(x *inner) { x.M["y"][1] = 4 },
		"map key":          func(x *inner) { x.M["z"] = x.M["y"]; delete(x.M, "y") },
		"pointer":          func(x *inner) { *x.P = 2 },
		"string map value": func(x *inner) { x.S["c"] = "e" },
		"string map key":   func(x *inner) { x.S["e"] = x.S["c"]; delete(x.S, "c") },
		"string map swap":  func(x *inner) { x.S["a"], x.S["c"] = x.S["c"], x.S["a"] },
		"nil":              func(x *inner) { x.P = nil },
	} {
		b := inner{When: time.Unix(5, 0), M: map[string][]int{"x": {1}, "y": {2, 3}}, S: map[string]string{"c": "d", "a": "b"}, P: new(int)}
		*b.P = 1
		if digestOf(&b) != d {
			t.Fatalf("%s: equal values, different digests", name)
		}
		mutate(&b)
		if digestOf(&b) == d {
			t.Errorf("%s: the digest did not change", name)
		}
	}
}

func TestMutationModeText(t *testing.T) {
	for _, m := range []MutationMode{MutationLog, MutationPanic, MutationOff} {
		b, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back MutationMode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("%s: round trip gave %v, %v", m, back, err)
		}
	}
	var m MutationMode
	if err := m.UnmarshalText([]byte("loud")); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

// A mutation found in a generation a follower applied from a cluster
// record names the mutated path only, not the live fields the record
// changed from the follower's file.
func TestAppliedRecordMutationPaths(t *testing.T) {
	ch := &faultChannel{}
	peer, peerSrc := newClusterWorker(t, ch, restartDoc("a", "4"), nil)
	src := newMem(restartDoc("a", "4"))
	var got []Mutation
	rt, err := New[clusterConfig](context.Background(), src, withChannel(ch), WithLogger(discardLogger()), WithEnv(noEnv),
		WithMutationObserver(func(m Mutation) { got = append(got, m) }))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	peerSrc.set(restartDoc("a", "8"))
	mustReloadC(t, peer, Published)
	v, rec := ch.current()
	if res, err := rt.applyVersion(context.Background(), v, rec); err != nil || res.Outcome != Published {
		t.Fatalf("apply = %+v, %v", res, err)
	}
	rt.Current().Config().Backend.Name = "changed" // the bug the detector exists for
	mustReloadC(t, rt, Published)
	if len(got) != 1 || strings.Join(got[0].Paths, ",") != "backend.name" {
		t.Fatalf("mutations %+v, want one naming backend.name only", got)
	}
}
