package gate

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// An Option configures a Gate.
type Option func(*options)

type options struct {
	ttl    time.Duration
	id     string
	prefix string
	log    *slog.Logger
	faults *faults // tests only
}

// DefaultTTL is the default lease time: the bound on how long the slots of
// a worker that died stay claimed. 10s rather than less: renewals (every
// eighth of it while a backend is limited, on etcd's leader) are most of
// an idle fleet's cost on etcd, a quarter of it (the time a worker may go without an answer
// before it falls back to its local share) outlasts an etcd election of
// about 2s, and 1,000 workers on a loaded 2-core machine kept their
// leases with it and lost them with 5s.
const DefaultTTL = 10 * time.Second

// DefaultPrefix is the default etcd key prefix of the claims.
const DefaultPrefix = "/reconf/gate/"

// WithTTL sets the worker's lease time (default DefaultTTL), rounded up to
// whole seconds, at least 1s. A dead worker's slots come back within it;
// a worker cut off from etcd is held to its local share after a quarter
// of it (and takes exactly its share after half; see the package doc).
// etcd may grant a longer lease than asked (its minimum is 1.5 times
// its election timeout); the timings here keep using the asked TTL, which
// is the safe side.
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithWorkerID names this worker in the claims (default
// host-pid-leaseID). IDs must be unique across the cluster.
func WithWorkerID(id string) Option { return func(o *options) { o.id = id } }

// WithPrefix sets the etcd key prefix of the claims (default
// DefaultPrefix). Workers that share limits must use the same prefix.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// faults are fault injections for tests; a nil *faults injects none.
type faults struct {
	// noRenewals stops the keep-alive from sending renewals, as a worker
	// too starved of CPU to renew does, while its connection and watches
	// still work.
	noRenewals atomic.Bool
}

func (f *faults) renewalsStopped() bool { return f != nil && f.noRenewals.Load() }

// withFaults injects faults (tests only).
func withFaults(f *faults) Option { return func(o *options) { o.faults = f } }
