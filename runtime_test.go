package reconf

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/fieldclass"
	"github.com/reconfhq/reconf/internal/restartopt"
	"github.com/reconfhq/reconf/internal/testkit"
)

func TestLifecycle(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	g1 := rt.Current()
	if g1.ID() != 1 || g1.Config().Routing.A != 1 {
		t.Fatalf("generation 1 = %d with a=%d", g1.ID(), g1.Config().Routing.A)
	}

	// Unchanged: no-op, no generation.
	res := mustReload(t, rt, NoOp)
	if res.Generation != 1 || rt.Current() != g1 {
		t.Fatalf("no-op made generation %d", res.Generation)
	}

	// A live change publishes generation 2.
	src.set(baseYAML(2))
	res = mustReload(t, rt, Published)
	if res.PreviousGeneration != 1 || res.Generation != 2 || res.Changed != 2 {
		t.Fatalf("result = %+v", res)
	}
	if got := rt.Current().Config().Routing.A; got != 2 {
		t.Fatalf("a = %d after publish", got)
	}

	// A restart field change is refused whole, even alongside live changes.
	src.set(strings.Replace(baseYAML(3), "127.0.0.1:8080", "127.0.0.1:9090", 1))
	res = mustReload(t, rt, RestartRequired)
	if res.Reason != ReasonRestart || res.RestartRequiredCount != 1 || res.RestartRequiredFields[0] != "server.address" {
		t.Fatalf("result = %+v", res)
	}
	if rt.Current().ID() != 2 || rt.Current().Config().Routing.A != 2 {
		t.Fatal("a restart-required candidate changed the active generation")
	}

	// Status reflects the last success and failure.
	st := rt.Status()
	if st.ActiveGeneration != 2 || st.LastSuccess.Generation != 2 || st.LastFailure.Outcome != RestartRequired || st.Busy || st.Source != "memory" {
		t.Fatalf("status = %+v", st)
	}
}

func TestKeyedDiffPaths(t *testing.T) {
	a := &testConfig{Backends: []testBackend{{Name: "stub", Timeout: time.Second}, {Name: "other"}}}
	b := &testConfig{Backends: []testBackend{{Name: "stub", Timeout: 2 * time.Second}, {Name: "other"}}}
	got := diffOf(a, b)
	if len(got) != 1 || got[0].Path != "backends[stub].timeout" || got[0].Class != classLive {
		t.Fatalf("Diff = %+v, want backends[stub].timeout (live)", got)
	}
	// Reordering a keyed list is a change of the list.
	c := &testConfig{Backends: []testBackend{{Name: "other"}, {Name: "stub", Timeout: time.Second}}}
	if got := diffOf(a, c); len(got) != 1 || got[0].Path != "backends" {
		t.Fatalf("reorder Diff = %+v, want backends", got)
	}
	// Adding an element shows its paths.
	d := &testConfig{Backends: append(append([]testBackend{}, a.Backends...), testBackend{Name: "new"})}
	for _, ch := range diffOf(a, d) {
		if !strings.HasPrefix(ch.Path, "backends") {
			t.Errorf("unexpected path %s", ch.Path)
		}
	}
}

func TestRestartPathsAreCappedAndSorted(t *testing.T) {
	type wide struct {
		Live int            `yaml:"live" reconf:"live"`
		Boot map[string]int `yaml:"boot" reconf:"restart"`
	}
	var b strings.Builder
	b.WriteString("boot:\n")
	for i := range 40 {
		fmt.Fprintf(&b, "  k%02d: 1\n", i)
	}
	src := newMem(b.String())
	rt, err := New[wide](context.Background(), src, WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	src.set(strings.ReplaceAll(b.String(), ": 1", ": 2") + "live: 5\n")
	res, _ := rt.Reload(context.Background(), TriggerSDK)
	if res.Outcome != RestartRequired || res.RestartRequiredCount != 40 || len(res.RestartRequiredFields) != maxListedPaths {
		t.Fatalf("result = %s count %d listed %d", res.Outcome, res.RestartRequiredCount, len(res.RestartRequiredFields))
	}
	for i := 1; i < len(res.RestartRequiredFields); i++ {
		if res.RestartRequiredFields[i-1] >= res.RestartRequiredFields[i] {
			t.Fatalf("paths not sorted: %v", res.RestartRequiredFields)
		}
	}
	if rt.Current().Config().Live != 0 {
		t.Fatal("live field applied alongside a restart-required change")
	}
}

func TestUnclassifiedFieldIsRestartRequired(t *testing.T) {
	type partly struct {
		Live  int `yaml:"live" reconf:"live"`
		Loose int `yaml:"loose"`
	}
	src := newMem("live: 1\nloose: 1\n")
	rt, err := New[partly](context.Background(), src, WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	src.set("live: 1\nloose: 2\n")
	res, _ := rt.Reload(context.Background(), TriggerSDK)
	if res.Outcome != RestartRequired || res.Reason != ReasonUnclassified || res.RestartRequiredFields[0] != "loose" {
		t.Fatalf("result = %+v", res)
	}
	if err := checkClassifiedType(reflect.TypeFor[partly]()); !errors.Is(err, fieldclass.ErrUnclassified) || !strings.Contains(err.Error(), "loose") {
		t.Fatalf("checkClassifiedType = %v", err)
	}
	if err := checkClassifiedType(reflect.TypeFor[testConfig]()); err != nil {
		t.Fatalf("checkClassifiedType(testConfig) = %v", err)
	}
}

func TestBadTagsFailConstruction(t *testing.T) {
	type badClass struct {
		X int `yaml:"x" reconf:"sometimes"`
	}
	type badDefault struct {
		X int `yaml:"x" reconf:"live" default:"many"`
	}
	type badRule struct {
		X int `yaml:"x" reconf:"live" validate:"min=lots"`
	}
	if _, err := New[badClass](context.Background(), Bytes("x", nil)); err == nil {
		t.Error("unknown class accepted")
	}
	if _, err := New[badDefault](context.Background(), Bytes("x", nil)); err == nil {
		t.Error("bad default accepted")
	}
	if _, err := New[badRule](context.Background(), Bytes("x", nil)); err == nil {
		t.Error("bad rule accepted")
	}
}

// recorder is a consumer that logs its calls and can be told to fail.
type recorder struct {
	name    string
	log     *[]string
	mu      *sync.Mutex
	fail    atomic.Bool
	state   atomic.Int64 // committed routing.a
	pending atomic.Int64
	block   chan struct{}
}

func (c *recorder) note(s string) {
	c.mu.Lock()
	*c.log = append(*c.log, c.name+":"+s)
	c.mu.Unlock()
}

func (c *recorder) Prepare(ctx context.Context, prev, next *testConfig) (Prepared, error) {
	if c.block != nil {
		select {
		case <-c.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.note("prepare")
	if c.fail.Load() {
		return nil, errors.New("injected failure")
	}
	c.pending.Store(int64(next.Routing.A))
	a := int64(next.Routing.A)
	return &Staged{
		OnCommit: func() { c.note("commit"); c.state.Store(a) },
		OnAbort:  func() { c.note("abort") },
		V:        &closeCounter{a: a},
	}, nil
}

type closeCounter struct {
	a      int64
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

func TestPrepareFailureInjection(t *testing.T) {
	for failAt := range 3 {
		t.Run(fmt.Sprintf("consumer %d fails", failAt), func(t *testing.T) {
			var log []string
			var mu sync.Mutex
			cs := make([]*recorder, 3)
			var opts []Option
			for i := range cs {
				cs[i] = &recorder{name: fmt.Sprint(i), log: &log, mu: &mu}
				opts = append(opts, WithConsumer(Key[any](fmt.Sprint(i)), cs[i], "routing"))
			}
			src := newMem(baseYAML(1))
			rt := newTestRuntime(t, src, opts...)
			pin := rt.Acquire()
			defer pin.Release()
			before := rt.Status()
			mu.Lock()
			log = nil
			mu.Unlock()

			cs[failAt].fail.Store(true)
			src.set(baseYAML(2))
			res := mustReload(t, rt, PreparationFailed)
			if res.Reason != ReasonConsumerRefused || !strings.Contains(res.Message, fmt.Sprintf("%q", fmt.Sprint(failAt))) {
				t.Fatalf("result = %+v", res)
			}
			// Prepared in order up to the failure, aborted in reverse.
			var want []string
			for i := 0; i <= failAt; i++ {
				want = append(want, fmt.Sprintf("%d:prepare", i))
			}
			for i := failAt - 1; i >= 0; i-- {
				want = append(want, fmt.Sprintf("%d:abort", i))
			}
			if fmt.Sprint(log) != fmt.Sprint(want) {
				t.Fatalf("calls = %v, want %v", log, want)
			}
			after := rt.Status()
			if rt.Current().ID() != 1 || after.ActiveGeneration != before.ActiveGeneration || after.Pinned != before.Pinned || after.RetainedGenerations != before.RetainedGenerations {
				t.Fatalf("state changed: before %+v after %+v", before, after)
			}
			for i, c := range cs {
				if c.state.Load() != 1 {
					t.Errorf("consumer %d state = %d, want 1", i, c.state.Load())
				}
			}
			if pin.ID() != 1 || pin.Config().Routing.A != 1 || Key[*closeCounter]("0").Get(pin).closed.Load() != 0 {
				t.Fatal("the pinned generation changed")
			}

			// Once the failure clears, the same candidate publishes and
			// every consumer commits in order.
			cs[failAt].fail.Store(false)
			mu.Lock()
			log = nil
			mu.Unlock()
			mustReload(t, rt, Published)
			if fmt.Sprint(log) != "[0:prepare 1:prepare 2:prepare 0:commit 1:commit 2:commit]" {
				t.Fatalf("calls = %v", log)
			}
			for _, c := range cs {
				if c.state.Load() != 2 {
					t.Errorf("consumer state = %d, want 2", c.state.Load())
				}
			}
		})
	}
}

func TestOnlyInterestedConsumersAreAsked(t *testing.T) {
	var log []string
	var mu sync.Mutex
	routing := &recorder{name: "routing", log: &log, mu: &mu}
	aliases := &recorder{name: "aliases", log: &log, mu: &mu}
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src,
		WithConsumer(Key[any]("routing"), routing, "routing"),
		WithConsumer(Key[any]("aliases"), aliases, "model_aliases"))
	mu.Lock()
	log = nil
	mu.Unlock()
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	if fmt.Sprint(log) != "[routing:prepare routing:commit]" {
		t.Fatalf("calls = %v", log)
	}
	// The aliases consumer's value is carried into generation 2.
	if Key[*closeCounter]("aliases").Get(rt.Current()).a != 1 || Key[*closeCounter]("routing").Get(rt.Current()).a != 2 {
		t.Fatal("consumer values not carried or replaced")
	}
}

func TestRetentionAndRetire(t *testing.T) {
	var retired []uint64
	var mu sync.Mutex
	var log []string
	var lmu sync.Mutex
	c := &recorder{name: "c", log: &log, mu: &lmu}
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src,
		WithRetention(3),
		WithConsumer(Key[any]("c"), c),
		WithRetireHook[testConfig](func(g *Generation[testConfig]) {
			mu.Lock()
			retired = append(retired, g.ID())
			mu.Unlock()
		}))
	p1 := rt.Acquire()
	v1 := Key[*closeCounter]("c").Get(p1)
	hookRan := 0
	p1.Generation().OnRetire(func() { hookRan++ })
	src.set(baseYAML(2))
	mustReload(t, rt, Published)
	p2 := rt.Acquire()
	src.set(baseYAML(3))
	mustReload(t, rt, Published)
	if st := rt.Status(); st.RetainedGenerations != 3 || st.Pinned != 2 {
		t.Fatalf("status = %+v", st)
	}
	// Budget 3 is full: active 3 plus pinned 1 and 2.
	src.set(baseYAML(4))
	res := mustReload(t, rt, RetentionBlocked)
	if res.Reason != ReasonRetention || rt.Current().ID() != 3 {
		t.Fatalf("result = %+v", res)
	}
	if v1.closed.Load() != 0 || hookRan != 0 {
		t.Fatal("a pinned generation's state was released")
	}
	p1.Release()
	if hookRan != 1 || v1.closed.Load() != 1 {
		t.Fatalf("retire of generation 1: hook ran %d, value closed %d", hookRan, v1.closed.Load())
	}
	mustReload(t, rt, Published)
	p2.Release()
	mu.Lock()
	got := fmt.Sprint(retired)
	mu.Unlock()
	if got != "[1 3 2]" && got != "[1 2 3]" {
		t.Fatalf("retired = %s", got)
	}
	// A hook on a retired generation runs at once.
	ran := false
	p1.Generation().OnRetire(func() { ran = true })
	if !ran {
		t.Fatal("OnRetire on a retired generation did not run")
	}
}

func TestBusy(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	block := make(chan struct{})
	src.mu.Lock()
	src.block = block
	src.mu.Unlock()
	src.set(baseYAML(2))
	done := make(chan Result)
	go func() {
		res, _ := rt.Reload(context.Background(), TriggerSDK)
		done <- res
	}()
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })
	for range 5 { // a reload folds instead (TestBurstFoldsIntoOneQueuedAttempt)
		res, err := rt.Check(context.Background())
		if err != nil || res.Outcome != Busy || res.Reason != ReasonInFlight {
			t.Fatalf("check while busy = %+v, %v", res, err)
		}
	}
	close(block)
	if res := <-done; res.Outcome != Published {
		t.Fatalf("first trigger = %s", res.Outcome)
	}
}

func TestAttemptOutlivesCallerContext(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src)
	block := make(chan struct{})
	src.mu.Lock()
	src.block = block
	src.mu.Unlock()
	src.set(baseYAML(2))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := rt.Reload(ctx, TriggerAPI)
		errc <- err
	}()
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reload err = %v, want context.Canceled", err)
	}
	close(block)
	// The generation is visible at the swap; the attempt is recorded just
	// after, before the runtime stops being busy.
	testkit.WaitFor(t, "generation 2, idle", func() bool { st := rt.Status(); return st.ActiveGeneration == 2 && !st.Busy })
	if st := rt.Status(); st.LastSuccess.Trigger != TriggerAPI {
		t.Fatalf("status = %+v", st)
	}
}

func TestAttemptTimeout(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithAttemptTimeout(20*time.Millisecond))
	src.mu.Lock()
	src.block = make(chan struct{})
	src.mu.Unlock()
	res := mustReload(t, rt, Canceled)
	if res.Reason != ReasonDeadline {
		t.Fatalf("reason = %s", res.Reason)
	}
}

func TestCheckNeverPublishes(t *testing.T) {
	var log []string
	var mu sync.Mutex
	c := &recorder{name: "c", log: &log, mu: &mu}
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, WithConsumer(Key[any]("c"), c))
	mu.Lock()
	log = nil
	mu.Unlock()
	src.set(baseYAML(2))
	res, err := rt.Check(context.Background())
	if err != nil || res.Outcome != Published || res.Reason != ReasonDryRunOK || !res.DryRun || res.Generation != 1 {
		t.Fatalf("check = %+v, %v", res, err)
	}
	if fmt.Sprint(log) != "[c:prepare c:abort]" || rt.Current().ID() != 1 || c.state.Load() != 1 {
		t.Fatalf("check published: calls %v, generation %d", log, rt.Current().ID())
	}
	// Check reports what a reload would: a restart-required candidate.
	src.set(strings.Replace(baseYAML(2), "8080", "8081", 1))
	if res, _ := rt.Check(context.Background()); res.Outcome != RestartRequired {
		t.Fatalf("check = %s", res.Outcome)
	}
	src.set(baseYAML(2))
	if res := mustReload(t, rt, Published); res.Generation != 2 {
		t.Fatalf("after check the next generation is %d, want 2", res.Generation)
	}
}

func TestCloseCancelsAndRefuses(t *testing.T) {
	src := newMem(baseYAML(1))
	var log []string
	var mu sync.Mutex
	c := &recorder{name: "c", log: &log, mu: &mu}
	rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()), WithConsumer(Key[any]("c"), c))
	if err != nil {
		t.Fatal(err)
	}
	v1 := Key[*closeCounter]("c").Get(rt.Current())
	c.block = make(chan struct{}) // the next Prepare waits for ctx
	src.set(baseYAML(2))
	done := make(chan Result)
	go func() {
		res, _ := rt.Reload(context.Background(), TriggerSDK)
		done <- res
	}()
	testkit.WaitFor(t, "an attempt in flight", func() bool { return rt.Status().Busy })
	pin := rt.Acquire()

	// A Close with a short deadline fails while the pin is held...
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = rt.Close(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want deadline", err)
	}
	if res := <-done; res.Outcome != Canceled || res.Reason != ReasonShutdown {
		t.Fatalf("in-flight attempt = %+v", res)
	}
	// ...triggers racing with it fail cleanly...
	if _, err := rt.Reload(context.Background(), TriggerSDK); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reload after Close = %v", err)
	}
	if _, err := rt.Check(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check after Close = %v", err)
	}
	if v1.closed.Load() != 0 {
		t.Fatal("a pinned generation's value was closed")
	}
	// ...and a retry succeeds once the pin goes, then Close is idempotent.
	pin.Release()
	if err := rt.Close(context.Background()); err != nil {
		t.Fatalf("Close retry = %v", err)
	}
	if v1.closed.Load() != 1 {
		t.Fatalf("value closed %d times, want 1", v1.closed.Load())
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if !rt.Status().Closed {
		t.Fatal("status not closed")
	}
}

func TestConcurrentClose(t *testing.T) {
	rt, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := rt.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		wg.Go(func() {
			_, _ = rt.Reload(context.Background(), TriggerSDK)
			p := rt.Acquire()
			p.Release()
			_ = rt.Status()
		})
	}
	wg.Wait()
}

func TestNewFailures(t *testing.T) {
	if _, err := New[testConfig](context.Background(), newMem("nope: 1\n"), WithEnv(noEnv)); err == nil {
		t.Fatal("New accepted an unknown field")
	}
	var log []string
	var mu sync.Mutex
	c := &recorder{name: "c", log: &log, mu: &mu}
	c.fail.Store(true)
	_, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv), WithConsumer(Key[any]("c"), c))
	var ce *ConsumerError
	if !errors.As(err, &ce) || ce.Consumer != "c" {
		t.Fatalf("err = %v, want ConsumerError", err)
	}
}

func TestPanickingConsumerIsInternalFailure(t *testing.T) {
	src := newMem(baseYAML(1))
	calls := 0
	rt := newTestRuntime(t, src, WithConsumer(Key[any]("p"), ConsumerFunc[testConfig](func(ctx context.Context, prev, next *testConfig) (Prepared, error) {
		calls++
		if prev != nil {
			panic("consumer bug")
		}
		return nil, nil
	})))
	src.set(baseYAML(2))
	res := mustReload(t, rt, InternalFailed)
	if res.Reason != ReasonInternal || rt.Current().ID() != 1 || calls != 2 {
		t.Fatalf("result = %+v", res)
	}
}

// TestFirstGenerationContinuesTheNumbering: a successor that starts at
// its predecessor's generation plus one keeps counting from there.
func TestFirstGenerationContinuesTheNumbering(t *testing.T) {
	src := newMem(baseYAML(1))
	rt := newTestRuntime(t, src, restartOption(restartopt.Restart{FirstGeneration: 8}))
	if id := rt.Current().ID(); id != 8 {
		t.Fatalf("first generation %d, want 8", id)
	}
	src.set(baseYAML(2))
	if res := mustReload(t, rt, Published); res.PreviousGeneration != 8 || res.Generation != 9 {
		t.Fatalf("reload after a continued start: %+v", res)
	}
	if st := rt.Status(); st.ActiveGeneration != 9 {
		t.Fatalf("status active generation %d, want 9", st.ActiveGeneration)
	}
}
