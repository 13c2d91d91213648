package reconftest

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reconfhq/reconf"
)

type config struct {
	Listen   string    `yaml:"listen" reconf:"restart" default:"127.0.0.1:0"`
	Backends []backend `yaml:"backends" reconf:"live"`
	Motd     string    `yaml:"motd" reconf:"live"`
}

type backend struct {
	Name   string `yaml:"name" validate:"required"`
	Weight int    `yaml:"weight"`
}

// The configurations every case runs through: B changes a backend's
// weight (a new pool), C only the motd (the consumer has nothing to
// rebuild and returns nil).
var (
	configA = []byte("backends:\n  - name: a\n    weight: 1\n  - name: b\n    weight: 2\n")
	configB = []byte("backends:\n  - name: a\n    weight: 1\n  - name: b\n    weight: 3\n")
	configC = []byte("backends:\n  - name: a\n    weight: 1\n  - name: b\n    weight: 3\nmotd: hi\n")
)

var poolKey = reconf.Key[*pool]("pools")

// bug is a deliberate break of the consumer contract, injected into the
// otherwise correct pools consumer.
type bug int

const (
	noBug         bug = iota
	sideEffect        // Prepare puts the new backends in service
	leakyAbort        // Abort leaves the staged pool (and its goroutine) running
	closeInCommit     // Commit closes the previous pool, which pinned work still uses
	notCloser         // the attached value has no Close, so a retired pool never stops
	pinLeak           // the unit of work never releases its pin
	panicInCommit     // Commit panics
)

// pools is a consumer written the way the contract asks: Prepare builds a
// pool aside, with a health-check goroutine; Commit puts its backends in
// service; Abort, or the pool's Close when its last generation retires,
// stops it. bug breaks one rule.
type pools struct {
	bug bug

	mu        sync.Mutex
	inService []string // what the rest of the process sees
	current   *pool
	open      int
	all       []*pool
}

type pool struct {
	owner    *pools
	backends []backend
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// unclosable hides the pool's Close from the runtime.
type unclosable struct{ *pool }

func (u unclosable) Close() {} // not io.Closer: no error result

func (p *pools) Prepare(_ context.Context, prev, next *config) (reconf.Prepared, error) {
	if prev != nil && reflect.DeepEqual(prev.Backends, next.Backends) {
		return nil, nil // nothing to rebuild
	}
	pl := p.newPool(next.Backends)
	names := make([]string, len(next.Backends))
	for i, b := range next.Backends {
		names[i] = b.Name
	}
	if p.bug == sideEffect {
		p.setInService(names, next.Backends)
	}
	var v any = pl
	if p.bug == notCloser {
		v = unclosable{pl}
	}
	return &reconf.Staged{
		OnCommit: func() {
			if p.bug == panicInCommit {
				panic("commit failed")
			}
			p.mu.Lock()
			old := p.current
			p.current = pl
			p.mu.Unlock()
			p.setInService(names, next.Backends)
			if p.bug == closeInCommit && old != nil {
				old.Close()
			}
		},
		OnAbort: func() {
			if p.bug != leakyAbort {
				pl.Close()
			}
		},
		V: v,
	}, nil
}

func (p *pools) newPool(bs []backend) *pool {
	pl := &pool{owner: p, backends: slices.Clone(bs), stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // the health checker
		defer close(pl.done)
		<-pl.stop
	}()
	p.mu.Lock()
	p.open++
	p.all = append(p.all, pl)
	p.mu.Unlock()
	return pl
}

func (p *pools) setInService(names []string, bs []backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inService = nil
	for i, n := range names {
		p.inService = append(p.inService, n+":"+strings.Repeat("*", bs[i].Weight))
	}
}

// state is the visible state: the backends in service.
func (p *pools) state() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.inService)
}

func (p *pools) openCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// closeAll stops every pool a broken consumer left running, so its
// goroutines do not outlive the test.
func (p *pools) closeAll() {
	p.mu.Lock()
	all := slices.Clone(p.all)
	p.mu.Unlock()
	for _, pl := range all {
		pl.Close()
	}
}

// Close stops the health checker; a second call does nothing.
func (pl *pool) Close() error {
	pl.once.Do(func() {
		close(pl.stop)
		<-pl.done
		pl.owner.mu.Lock()
		pl.owner.open--
		pl.owner.mu.Unlock()
	})
	return nil
}

func poolSubject(b bug) func(testing.TB) Subject[config] {
	return func(t testing.TB) Subject[config] {
		p := &pools{bug: b}
		t.Cleanup(p.closeAll)
		use := func(rt *reconf.Runtime[config]) {
			pin := rt.Acquire()
			defer pin.Release()
			_ = poolKey.Get(pin)
		}
		if b == pinLeak {
			use = func(rt *reconf.Runtime[config]) { _ = rt.Acquire() }
		}
		return Subject[config]{Consumer: p, Name: string(poolKey), State: p.state, Open: p.openCount, Use: use}
	}
}

// TestConsumerCatchesBrokenConsumers runs the kit on the correct pools
// consumer, which must pass with no failure, and on each deliberate break,
// which must be reported under its check.
func TestConsumerCatchesBrokenConsumers(t *testing.T) {
	tests := []struct {
		name string
		bug  bug
		want []check
	}{
		{"correct", noBug, nil},
		{"prepare with a side effect", sideEffect, []check{checkSideEffect, checkAbortState}},
		{"abort that leaks", leakyAbort, []check{checkAbortLeak, checkGoroutineLeak}},
		{"commit closes the previous value", closeInCommit, []check{checkEarlyClose}},
		{"value the runtime cannot close", notCloser, []check{checkRetire}},
		{"unreleased pin", pinLeak, []check{checkPinLeak}},
		{"panic in commit", panicInCommit, []check{checkLogged}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingT{TB: t}
			TestConsumer(rec, poolSubject(tt.bug), configA, configB, configC)
			got := rec.failures()
			if tt.want == nil && len(got) > 0 {
				t.Fatalf("the kit failed a correct consumer:\n%s", strings.Join(got, "\n"))
			}
			for _, c := range tt.want {
				if !rec.reported(c) {
					t.Errorf("the kit did not report %s; it reported:\n%s", c, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// TestConsumerAsSubtests runs the kit as a consumer's author would, on a
// *testing.T: each case is a subtest.
func TestConsumerAsSubtests(t *testing.T) {
	TestConsumer(t, poolSubject(noBug), configA, configB)
}

func TestConsumerRefusesUnusableInput(t *testing.T) {
	tests := []struct {
		name    string
		configs [][]byte
		want    check
	}{
		{"one configuration", [][]byte{configA}, checkSetup},
		{"second changes nothing the consumer reads", [][]byte{configB, configC}, checkSetup},
		{"invalid first", [][]byte{[]byte("backends: [{weight: 1}]\n"), configB}, checkPublish},
		{"invalid second", [][]byte{configA, []byte("listen: elsewhere\n")}, checkPublish},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingT{TB: t}
			TestConsumer(rec, poolSubject(noBug), tt.configs...)
			if !rec.reported(tt.want) {
				t.Errorf("the kit did not report %s; it reported:\n%s", tt.want, strings.Join(rec.failures(), "\n"))
			}
		})
	}
}
