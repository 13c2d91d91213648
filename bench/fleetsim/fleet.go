//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/source"
)

// Modes of a follower.
const (
	// modeGateway is a whole reconfd worker, as `reconfd serve` builds it
	// (gateway.New with a cluster): its own etcd client (or a shared one,
	// -clients), the channel, the concurrency gate with its lease, the
	// follower with its presence row on that lease, the history, and the
	// backends consumer preparing routing state on every apply. Only the
	// listener is missing.
	modeGateway = "gateway"
	// modeRuntime is the propagation path alone: a reconf runtime of
	// reconfd's configuration type with a follower, no consumer and no
	// gate. In either mode followers may share etcd clients (-clients).
	modeRuntime = "runtime"
)

// member is one worker of the simulated fleet.
type member interface {
	reload(ctx context.Context) (reconf.Result, error)
	shutdown(ctx context.Context) error
}

type gatewayMember struct{ g *gateway.Gateway }

func (m gatewayMember) reload(ctx context.Context) (reconf.Result, error) {
	return m.g.Reload(ctx, reconf.TriggerAPI)
}

func (m gatewayMember) shutdown(ctx context.Context) error { return m.g.Shutdown(ctx) }

type runtimeMember struct {
	rt  *reconf.Runtime[gateway.Config]
	f   *propagate.Follower
	cli *clientv3.Client // owned when not shared
}

func (m runtimeMember) reload(ctx context.Context) (reconf.Result, error) {
	return m.rt.Reload(ctx, reconf.TriggerAPI)
}

func (m runtimeMember) shutdown(ctx context.Context) error {
	err := errors.Join(m.f.Close(ctx), m.rt.Close(ctx))
	if m.cli != nil {
		err = errors.Join(err, m.cli.Close())
	}
	return err
}

// fleet is the publisher (member 0) and the followers (1..n).
type fleet struct {
	members []member
	shared  []*clientv3.Client // runtime mode: clients several members use
	track   *tracker
}

// startFleet starts the publisher and n followers, several at a time.
// Member 0 reads pubPath, the others folPath.
func startFleet(ctx context.Context, c config, endpoints []string, pubPath, folPath string, log *slog.Logger) (*fleet, error) {
	mode, n, clients := c.mode, c.followers, c.clients
	fl := &fleet{members: make([]member, n+1), track: newTracker(n + 1)}
	if clients > 0 && clients < n+1 {
		for range clients {
			cli, err := propagate.Connect(endpoints, log)
			if err != nil {
				fl.stop(ctx)
				return nil, err
			}
			fl.shared = append(fl.shared, cli)
		}
	}
	errs := make([]error, n+1)
	start := func(i int) {
		path := folPath
		if i == 0 {
			path = pubPath
		}
		obs := reconf.WithObserver(reconf.ObserverFunc(func(res reconf.Result) { fl.track.observe(i, res) }))
		switch mode {
		case modeGateway:
			g, err := gateway.New(ctx, path,
				gateway.WithCluster(gateway.ClusterOptions{Endpoints: endpoints, Client: fl.sharedClient(i), Prefix: "/reconf/fleetsim", Worker: strconv.Itoa(i + 1), Host: fl.host(i), GateTTL: c.gateTTL}),
				gateway.WithLogger(log.With("follower", i)),
				gateway.WithRuntimeOptions(obs))
			if err != nil {
				errs[i] = err
				return
			}
			fl.members[i] = gatewayMember{g}
		default:
			m, err := startRuntime(ctx, endpoints, fl.sharedClient(i), i, path, obs, log.With("follower", i))
			if err != nil {
				errs[i] = err
				return
			}
			fl.members[i] = m
		}
	}
	// The publisher first, so that it seeds version 1 from its file.
	start(0)
	if errs[0] != nil {
		fl.stop(ctx)
		return nil, fmt.Errorf("publisher: %w", errs[0])
	}
	// At most 8 starting at once, and with a start rate, no faster than
	// it: follower j starts no sooner than j/rate after the first.
	t0 := time.Now()
	parallel(n, 8, func(j int) {
		if c.startRate > 0 {
			if err := sleep(ctx, time.Until(t0.Add(time.Duration(float64(j)/c.startRate*float64(time.Second))))); err != nil {
				errs[j+1] = err
				return
			}
		}
		start(j + 1)
	})
	if err := errors.Join(errs...); err != nil {
		fl.stop(ctx)
		return nil, err
	}
	return fl, nil
}

// host names member i's machine: its own, as a fleet of that many
// machines would have, or its shared client's (the workers of one host
// share a local proxy's connection).
func (fl *fleet) host(i int) string {
	if len(fl.shared) > 0 {
		i %= len(fl.shared)
	}
	return "host" + strconv.Itoa(i)
}

func (fl *fleet) sharedClient(i int) *clientv3.Client {
	if len(fl.shared) == 0 {
		return nil
	}
	return fl.shared[i%len(fl.shared)]
}

func startRuntime(ctx context.Context, endpoints []string, shared *clientv3.Client, i int, path string, obs reconf.Option, log *slog.Logger) (runtimeMember, error) {
	var m runtimeMember
	cli := shared
	if cli == nil {
		c, err := propagate.Connect(endpoints, log)
		if err != nil {
			return m, err
		}
		cli, m.cli = c, c
	}
	fail := func(err error) (runtimeMember, error) {
		if m.rt != nil {
			_ = m.rt.Close(ctx)
		}
		if m.cli != nil {
			m.cli.Close()
		}
		return runtimeMember{}, err
	}
	ch, err := propagate.NewChannel(cli, "/reconf/fleetsim", propagate.WithWorkerID("fleetsim-"+strconv.Itoa(i)))
	if err != nil {
		return fail(err)
	}
	src, err := source.File(path)
	if err != nil {
		return fail(err)
	}
	m.rt, err = reconf.New[gateway.Config](ctx, src,
		ch.Option(), reconf.WithLogger(log),
		reconf.WithBaseDir(filepath.Dir(path)), obs)
	if err != nil {
		return fail(err)
	}
	m.f, err = propagate.Follow(ctx, ch, m.rt, propagate.WithLogger(log))
	if err != nil {
		return fail(err)
	}
	return m, nil
}

// stop shuts every member down, several at a time.
func (fl *fleet) stop(ctx context.Context) error {
	errs := make([]error, len(fl.members))
	parallel(len(fl.members), 16, func(i int) {
		if m := fl.members[i]; m != nil {
			errs[i] = m.shutdown(ctx)
		}
	})
	for _, c := range fl.shared {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// parallel runs fn(0..n-1) on at most width goroutines.
func parallel(n, width int, fn func(int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, width)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// tracker collects, for the version being awaited, when each member
// applied it, and every follower apply's own duration.
type tracker struct {
	mu      sync.Mutex
	applied []uint64 // newest version each member runs
	want    uint64
	left    int
	last    time.Time
	done    chan struct{}
	applies []time.Duration // Result.Duration of each cluster apply
	failed  []string        // reasons of failed applies
}

func newTracker(n int) *tracker { return &tracker{applied: make([]uint64, n)} }

// expect starts waiting for version v on every member.
func (t *tracker) expect(v uint64) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want, t.done, t.last = v, make(chan struct{}), time.Time{}
	t.left = 0
	for _, a := range t.applied {
		if a < v {
			t.left++
		}
	}
	if t.left == 0 {
		close(t.done)
	}
	return t.done
}

// result returns when the last member applied the awaited version and how
// many have not yet.
func (t *tracker) result() (time.Time, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.left
}

func (t *tracker) observe(i int, res reconf.Result) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if res.Trigger == reconf.TriggerCluster {
		if res.Outcome == reconf.Published {
			t.applies = append(t.applies, res.Duration)
		} else if !res.Outcome.OK() && res.Outcome != reconf.Busy {
			t.failed = append(t.failed, string(res.Reason))
		}
	}
	if res.Outcome != reconf.Published || res.Generation <= t.applied[i] {
		return
	}
	was := t.applied[i]
	t.applied[i] = res.Generation
	if t.done != nil && was < t.want && res.Generation >= t.want {
		t.left--
		t.last = now
		if t.left == 0 {
			close(t.done)
		}
	}
}

// takeApplies returns the apply durations recorded so far and forgets them.
func (t *tracker) takeApplies() ([]time.Duration, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, f := t.applies, t.failed
	t.applies, t.failed = nil, nil
	return a, f
}
