package gateway

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/propagate"
)

// cooldownShare carries backends' cooldowns between the workers of a
// fleet. Each backend name that has cooled down has a key under the
// channel's prefix (CooldownPrefix), holding the end of its latest
// cooldown in unix nanoseconds: runtime state beside the channel, not a
// configuration version. The worker whose request starts a cooldown
// writes it with compare-and-set on what it read, so one transition is
// one write for the fleet: a worker that loses the race, or finds a
// cooldown already running, adopts the one in etcd instead. Every worker
// watches the keys and adopts what the others write. The request path
// never waits on etcd: it hands the transition to the share's goroutine.
type cooldownShare struct {
	cli    *clientv3.Client
	prefix string
	src    *healthSource
	log    *slog.Logger

	notes  chan cooldownNote
	cancel context.CancelFunc
	done   chan struct{}

	// writes counts the transitions this worker wrote; lost those whose
	// write another worker's won or made needless.
	writes, lost atomic.Uint64
}

// cooldownNote is a cooldown a request of this worker started.
type cooldownNote struct {
	name  string
	until int64
}

// CooldownPrefix is the etcd prefix of the backends' shared cooldowns
// under a service's cluster prefix.
func CooldownPrefix(prefix string) string { return strings.TrimRight(prefix, "/") + "/cooldown/" }

// startCooldownShare reads the fleet's running cooldowns into src, then
// follows them. It does not fail: a worker that cannot read them starts
// with none and learns of later ones from the watch.
func startCooldownShare(cli *clientv3.Client, prefix string, src *healthSource, log *slog.Logger) *cooldownShare {
	ctx, cancel := context.WithCancel(context.Background())
	s := &cooldownShare{cli: cli, prefix: CooldownPrefix(prefix), src: src, log: log,
		notes: make(chan cooldownNote, 64), cancel: cancel, done: make(chan struct{})}
	src.onCool = s.note
	go s.run(ctx)
	return s
}

// note hands a transition to the share's goroutine, without waiting: a
// full queue drops it (the fleet's other workers then cool the backend
// down on their own failures).
func (s *cooldownShare) note(h *deploymentHealth, until int64) {
	select {
	case s.notes <- cooldownNote{h.name, until}:
	default:
	}
}

func (s *cooldownShare) run(ctx context.Context) {
	defer close(s.done)
	rev := s.load(ctx)
	w := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-s.notes:
			s.write(ctx, n)
		case resp, ok := <-w:
			if !ok {
				if ctx.Err() != nil {
					return
				}
				// A compacted or cut watch: read the state again and go on.
				rev = s.load(ctx)
				w = s.cli.Watch(clientv3.WithRequireLeader(ctx), s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
				continue
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					s.adopt(string(ev.Kv.Key), ev.Kv.Value)
				}
			}
		}
	}
}

// load adopts every cooldown in etcd and returns the revision read at.
func (s *cooldownShare) load(ctx context.Context) int64 {
	rctx, cancel := context.WithTimeout(ctx, propagate.DefaultRequestTimeout)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("could not read the fleet's cooldowns", "error", err)
		}
		return 0
	}
	for _, kv := range resp.Kvs {
		s.adopt(string(kv.Key), kv.Value)
	}
	return resp.Header.Revision
}

// adopt applies the cooldown a key holds.
func (s *cooldownShare) adopt(key string, value []byte) {
	until, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return
	}
	s.src.health(strings.TrimPrefix(key, s.prefix)).coolUntil(until)
}

// write records a transition unless another worker's cooldown runs:
// compare-and-set on the key's revision as read.
func (s *cooldownShare) write(ctx context.Context, n cooldownNote) {
	ctx, cancel := context.WithTimeout(ctx, propagate.DefaultRequestTimeout)
	defer cancel()
	key := s.prefix + n.name
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		s.log.Warn("could not share a backend's cooldown", "backend", n.name, "error", err)
		return
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if len(resp.Kvs) == 1 {
		kv := resp.Kvs[0]
		if cur, err := strconv.ParseInt(string(kv.Value), 10, 64); err == nil && cur > time.Now().UnixNano() {
			s.lost.Add(1)
			s.adopt(key, kv.Value)
			return
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
	}
	tr, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, strconv.FormatInt(n.until, 10))).Else(clientv3.OpGet(key)).Commit()
	switch {
	case err != nil:
		s.log.Warn("could not share a backend's cooldown", "backend", n.name, "error", err)
	case tr.Succeeded:
		s.writes.Add(1)
	default:
		s.lost.Add(1)
		if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			s.adopt(key, kvs[0].Value)
		}
	}
}

// Close stops the share's goroutine.
func (s *cooldownShare) Close() {
	s.cancel()
	<-s.done
}
