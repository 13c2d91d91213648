package reconftest

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/source"
)

// Subject is one fresh instance of the consumer under test, with what the
// kit needs to observe it.
type Subject[T any] struct {
	// Consumer is the consumer under test.
	Consumer reconf.Consumer[T]
	// Name is the name it is registered under (default "subject"): that
	// of the reconf.Key the service reads its value with, so Use can read
	// it through that key.
	Name string
	// Paths are the paths it is registered for, as given to
	// reconf.WithConsumer; none means every change.
	Paths []string
	// State returns what the rest of the process can see of the consumer
	// (the routing table it swapped in, a gauge it set): what Commit may
	// change and Prepare and Abort must not. Snapshots are compared with
	// reflect.DeepEqual, so return a copy. Nil when the consumer's only
	// visible state is the value it attaches to each generation.
	State func() any
	// Open returns how many of the values its Prepare created are not yet
	// released, by Abort or by their Close when their last generation
	// retires. With it the kit checks that an aborted value is released
	// at once and a published one exactly when its last pin goes. Nil
	// when its values hold nothing to release.
	Open func() int
	// Use, if set, runs one unit of work the way the service does (a
	// request: Acquire, read the consumer's value, Release). The kit runs
	// it after every step and fails when it returns with a pin still held.
	Use func(rt *reconf.Runtime[T])
	// Options are more options for reconf.New (WithEnv, WithBaseDir, ...).
	Options []reconf.Option
}

// caseTimeout bounds each attempt of a case and the Close that ends it,
// so a consumer that hangs fails its case instead of the test binary.
const caseTimeout = 30 * time.Second

// refuserName is the consumer the kit registers after the subject, to
// refuse a candidate the subject has prepared.
const refuserName = "reconftest-refuser"

// TestConsumer checks a consumer against the contract of reconf.Consumer
// (see the package documentation for the list). newSubject returns a fresh
// subject for each case; configs are at least two valid configurations of
// T in YAML: the runtime starts on the first, and each next one must change
// a field under the subject's Paths, so a reload asks the consumer to
// Prepare. With a *testing.T each case is a subtest; failures are reported
// with t.Errorf, each starting "reconftest: <check>:".
//
// TestConsumer must not run in parallel with other tests (its goroutine
// check sees the whole binary).
func TestConsumer[T any](t testing.TB, newSubject func(t testing.TB) Subject[T], configs ...[]byte) {
	t.Helper()
	if len(configs) < 2 {
		t.Errorf("reconftest: %s: TestConsumer needs at least two configurations, got %d", checkSetup, len(configs))
		return
	}
	cases := []struct {
		name string
		run  func(*kitCase[T])
	}{
		{"reload", (*kitCase[T]).reloads},
		{"refused-by-later-consumer", (*kitCase[T]).refused},
		{"check", (*kitCase[T]).check},
		{"retire", (*kitCase[T]).retire},
	}
	for _, c := range cases {
		run := func(t testing.TB) {
			t.Helper()
			k := startCase(t, newSubject, configs)
			if k == nil {
				return
			}
			if k.startup() {
				c.run(k)
			}
			k.finish()
		}
		if tt, ok := t.(*testing.T); ok {
			tt.Run(c.name, func(t *testing.T) { run(t) })
		} else {
			run(prefixed{t, c.name})
		}
	}
}

// prefixed names the case in each failure when cases cannot be subtests.
type prefixed struct {
	testing.TB
	name string
}

func (p prefixed) Errorf(format string, args ...any) {
	p.TB.Helper()
	p.TB.Errorf("%s: "+format, append([]any{p.name}, args...)...)
}

// kitCase is one case: a subject registered on a runtime over a file.
type kitCase[T any] struct {
	t       testing.TB
	s       Subject[T]
	w       *watched[T]
	rt      *reconf.Runtime[T]
	path    string
	configs [][]byte
	key     reconf.Key[any]
	leaks   goleak.Option // the goroutines that ran before the case
	logs    *recordedLogs

	refuse bool // the refuser refuses (written only between attempts)
}

func startCase[T any](t testing.TB, newSubject func(testing.TB) Subject[T], configs [][]byte) *kitCase[T] {
	t.Helper()
	k := &kitCase[T]{t: t, s: newSubject(t), configs: configs, logs: &recordedLogs{}}
	if k.s.Consumer == nil {
		t.Errorf("reconftest: %s: the subject has no Consumer", checkSetup)
		return nil
	}
	if k.s.Name == "" {
		k.s.Name = "subject"
	}
	k.key = reconf.Key[any](k.s.Name)
	k.w = &watched[T]{c: k.s.Consumer, state: k.s.State}
	k.path = filepath.Join(t.TempDir(), "config.yaml")
	WriteConfig(t, k.path, configs[0])
	src, err := source.File(k.path)
	if err != nil {
		t.Errorf("reconftest: %s: %v", checkSetup, err)
		return nil
	}
	// The subject's own goroutines, started by newSubject, are its
	// business; everything started from here on must end with the case.
	k.leaks = goleak.IgnoreCurrent()
	refuser := reconf.ConsumerFunc[T](func(context.Context, *T, *T) (reconf.Prepared, error) {
		if k.refuse {
			return nil, fmt.Errorf("refused on purpose, after %s prepared", k.s.Name)
		}
		return nil, nil
	})
	opts := []reconf.Option{reconf.WithAttemptTimeout(caseTimeout)}
	opts = append(opts, k.s.Options...)
	opts = append(opts,
		reconf.WithLogger(slog.New(k.logs)),
		reconf.WithConsumer(k.key, reconf.Consumer[T](k.w), k.s.Paths...),
		reconf.WithConsumer(reconf.Key[any](refuserName), reconf.Consumer[T](refuser)))
	k.rt, err = reconf.New[T](context.Background(), src, opts...)
	if err != nil {
		k.report()
		t.Errorf("reconftest: %s: the runtime did not start on the first configuration: %v", checkPublish, err)
		return nil
	}
	return k
}

func (k *kitCase[T]) errorf(c check, format string, args ...any) {
	k.t.Helper()
	k.t.Errorf("reconftest: %s: "+format, append([]any{c}, args...)...)
}

// report passes on what the wrapper and the log recorded.
func (k *kitCase[T]) report() {
	k.t.Helper()
	for _, f := range k.w.drain() {
		k.errorf(f.check, "%s", f.msg)
	}
	for _, m := range k.logs.drain() {
		k.errorf(checkLogged, "the runtime logged %s", m)
	}
}

// startup checks generation 1: one Prepare, committed, its value attached.
func (k *kitCase[T]) startup() bool {
	k.t.Helper()
	p, n := k.w.last()
	if n != 1 {
		k.errorf(checkSetup, "the consumer was prepared %d time(s) at start-up, want 1", n)
		return false
	}
	k.published(p, nil)
	k.use()
	return true
}

// reloads publishes every configuration in turn, then the first again.
func (k *kitCase[T]) reloads() {
	k.t.Helper()
	for i := 1; i <= len(k.configs); i++ {
		if !k.publish(i % len(k.configs)) {
			return
		}
	}
}

// refused has a later consumer refuse a candidate the subject prepared:
// the subject must be aborted and nothing may change; then the same
// candidate publishes.
func (k *kitCase[T]) refused() {
	k.t.Helper()
	k.refuse = true
	res, p := k.attempt(1, false)
	k.refuse = false
	if res.Outcome != reconf.PreparationFailed {
		k.errorf(checkSetup, "with a later consumer refusing, the reload of configs[1] was %s (%s), want %s: %s", res.Outcome, res.Reason, reconf.PreparationFailed, res.Message)
		return
	}
	k.aborted(p, "a later consumer refused")
	k.report()
	k.use()
	k.publish(1)
}

// check runs a dry run: the subject is prepared, then aborted.
func (k *kitCase[T]) check() {
	k.t.Helper()
	res, p := k.attempt(1, true)
	if res.Outcome != reconf.Published || res.Reason != reconf.ReasonDryRunOK {
		k.errorf(checkPublish, "a Check of configs[1] was %s (%s), want %s: %s", res.Outcome, res.Reason, reconf.ReasonDryRunOK, res.Message)
		return
	}
	k.aborted(p, "a dry run (Check)")
	k.report()
	k.use()
}

// retire pins generation 1 across a reload: its value must stay open
// until the pin is released, and be closed then.
func (k *kitCase[T]) retire() {
	k.t.Helper()
	pin := k.rt.Acquire()
	old := pin.Generation()
	if !k.publish(1) {
		pin.Release()
		return
	}
	cur := k.rt.Current()
	if k.s.Open != nil {
		if got, want := k.s.Open(), k.distinctValues(old, cur); got < want {
			k.errorf(checkEarlyClose, "Open() = %d while generation %d is pinned, want %d: a value was released while a pin still held it (the runtime closes a value when its last generation retires; Commit must not close the previous one)", got, old.ID(), want)
		}
	}
	pin.Release()
	k.checkOpen("after generation " + fmt.Sprint(old.ID()) + " retired")
	k.report()
}

// attempt writes configs[i] and reloads (or checks), returning the result
// and the subject's Prepare of it (nil when it was not asked).
func (k *kitCase[T]) attempt(i int, dry bool) (reconf.Result, *prepared) {
	k.t.Helper()
	_, before := k.w.last()
	WriteConfig(k.t, k.path, k.configs[i])
	ctx := context.Background()
	var res reconf.Result
	var err error
	if dry {
		res, err = k.rt.Check(ctx)
	} else {
		res, err = k.rt.Reload(ctx, reconf.TriggerSDK)
	}
	if err != nil {
		k.errorf(checkSetup, "the attempt on configs[%d] returned %v", i, err)
	}
	p, after := k.w.last()
	if after == before {
		p = nil
	}
	return res, p
}

// publish reloads configs[i], which must publish, and checks the new
// generation.
func (k *kitCase[T]) publish(i int) bool {
	k.t.Helper()
	prev := k.rt.Current()
	res, p := k.attempt(i, false)
	if res.Outcome != reconf.Published {
		k.report()
		k.errorf(checkPublish, "the reload of configs[%d] was %s (%s), want %s: %s", i, res.Outcome, res.Reason, reconf.Published, res.Message)
		return false
	}
	if i == 1 {
		k.rebuilds(p)
	}
	k.published(p, prev)
	k.use()
	return true
}

// rebuilds checks that the consumer staged a change for configs[1]:
// without one, the cases that abort or retire it test nothing.
func (k *kitCase[T]) rebuilds(p *prepared) bool {
	k.t.Helper()
	switch {
	case p == nil:
		k.errorf(checkSetup, "configs[1] changes no field under the subject's paths %q, so the consumer is not asked to Prepare; make it differ from configs[0] there", k.s.Paths)
	case p.inner == nil:
		k.errorf(checkSetup, "the consumer had nothing to rebuild for configs[1] (Prepare returned nil); make configs[1] change what it builds")
	default:
		return true
	}
	return false
}

// published checks the generation an attempt published: the subject's
// change committed once and never aborted, its value (or the previous one
// when it attached none) on the new generation.
func (k *kitCase[T]) published(p *prepared, prev *reconf.Generation[T]) {
	k.t.Helper()
	cur := k.rt.Current()
	got, _ := k.key.Lookup(cur)
	var want any
	if prev != nil {
		want, _ = k.key.Lookup(prev)
	}
	switch {
	case p == nil:
	case p.inner == nil:
		// Nothing to rebuild: the previous value carries over.
	default:
		if c, a := k.w.counts(p); c != 1 || a != 0 {
			k.errorf(checkCommit, "generation %d published, but the consumer's change was committed %d and aborted %d time(s), want 1 and 0", cur.ID(), c, a)
		}
		if p.value != nil {
			want = p.value
		}
	}
	if !sameValue(got, want) {
		k.errorf(checkValue, "generation %d holds the value %s, want %s", cur.ID(), brief(got), brief(want))
	}
	k.checkOpen(fmt.Sprintf("after generation %d published", cur.ID()))
	k.report()
}

// aborted checks an attempt that did not publish: the subject's change
// aborted once, never committed, and nothing changed.
func (k *kitCase[T]) aborted(p *prepared, why string) {
	k.t.Helper()
	if !k.rebuilds(p) {
		return
	}
	if c, a := k.w.counts(p); c != 0 || a != 1 {
		k.errorf(checkCommit, "%s, but the consumer's change was committed %d and aborted %d time(s), want 0 and 1", why, c, a)
	}
	if k.s.Open != nil {
		if got, want := k.s.Open(), k.distinctValues(k.rt.Current()); got != want {
			k.errorf(checkAbortLeak, "%s: Open() = %d after Abort, want %d: Abort must release what Prepare created", why, got, want)
		}
	}
}

// checkOpen compares Open with the values the retained generations hold,
// when nothing but the active generation is retained.
func (k *kitCase[T]) checkOpen(when string) {
	k.t.Helper()
	if k.s.Open == nil || k.rt.Status().RetainedGenerations != 1 {
		return
	}
	got, want := k.s.Open(), k.distinctValues(k.rt.Current())
	switch {
	case got > want:
		k.errorf(checkRetire, "%s, Open() = %d, want %d: a value of a retired generation, or an aborted one, was not released (the runtime closes a retired value through io.Closer)", when, got, want)
	case got < want:
		k.errorf(checkRetire, "%s, Open() = %d, want %d: a value still in use was released, or one was released twice", when, got, want)
	}
}

// distinctValues counts the subject's values the generations hold that
// Open counts: those created by a Prepare.
func (k *kitCase[T]) distinctValues(gens ...*reconf.Generation[T]) int {
	var seen []any
	for _, g := range gens {
		v, ok := k.key.Lookup(g)
		if !ok || v == nil || slices.ContainsFunc(seen, func(s any) bool { return sameValue(s, v) }) {
			continue
		}
		seen = append(seen, v)
	}
	return len(seen)
}

// use runs the subject's unit of work and checks it released its pins.
func (k *kitCase[T]) use() {
	k.t.Helper()
	if k.s.Use == nil {
		return
	}
	before := k.rt.Status().Pinned
	id := k.rt.Current().ID()
	k.s.Use(k.rt)
	if after := k.rt.Status().Pinned; after > before {
		k.errorf(checkPinLeak, "Use returned with %d pin(s) more than before, on generation %d: every Acquire needs one Release", after-before, id)
	}
}

// finish closes the runtime and checks that everything the case started
// ended: pins, values, goroutines.
func (k *kitCase[T]) finish() {
	k.t.Helper()
	if st := k.rt.Status(); st.Pinned > 0 {
		// Close would wait for the pins until its deadline: report them
		// now and close with none, so the test does not hang.
		k.errorf(checkPinLeak, "%d pin(s) still held when the case ended, keeping %d generation(s) (active %d); every Acquire needs one Release",
			st.Pinned, st.RetainedGenerations, st.ActiveGeneration)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_ = k.rt.Close(ctx)
		k.report()
		return
	}
	CloseRuntime(k.t, k.rt, caseTimeout)
	if k.s.Open != nil {
		if n := k.s.Open(); n != 0 {
			k.errorf(checkRetire, "Open() = %d after the runtime closed, want 0: a value was not released (the runtime closes a retired value through io.Closer; is it one?)", n)
		}
	}
	if err := goleak.Find(k.leaks); err != nil {
		k.errorf(checkGoroutineLeak, "a goroutine started during the case is still running after the runtime closed (an Abort or a value's Close that does not stop what Prepare started?): %v", err)
	}
	k.report()
}
