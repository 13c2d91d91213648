package gate

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// keepAlive renews the lease at least every renewGap (less a random
// eighth of it, so that the workers of a fleet started together do not
// renew together), and when asked (Renew), over one long-lived
// LeaseKeepAlive stream.
//
// A stream per renewal (clientv3's KeepAliveOnce) costs a new HTTP/2
// stream, its headers and a handler goroutine on both sides, and on an
// authenticated cluster a fresh Authenticate call, every period: at a
// thousand workers that was most of an idle fleet's CPU. clientv3's own
// KeepAlive does keep one stream, but renews every third of the TTL and
// hides when a renewal was sent, and the send time is what the phases
// count from.
//
// Renewals are pipelined: a renewal that is answered late still counts,
// from when it was sent (etcd answers the requests of a stream in order,
// and its expiry is at least TTL after the send), so a slow etcd makes the
// worker's contact older instead of failing it. A stream that answers
// nothing for half a TTL is replaced. A renewal answered "not found" (the
// lease expired while the worker was cut off) makes the Gate take a new
// lease, which counts as a rejoin. A renewal asked for while one is in
// flight is not sent: that one's answer serves, unless it allowed a
// longer gap than the one now due (a backend became limited).
func (g *Gate) keepAlive() {
	var (
		t  = time.NewTimer(jittered(g.renewGap()))
		rs *renewals
	)
	defer func() {
		t.Stop()
		rs.close()
	}()
	for {
		asked := false
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.kaKick:
			asked = true
		case <-g.kaLost:
			// Several renewals in flight may each be answered "not
			// found": the ones answered while the first's new lease was
			// being granted name a lease already replaced.
			if g.lost.Load() == g.lease.Load() {
				g.regrant()
			}
		}
		now := g.now()
		if rs != nil && rs.stalled(now, g.ttl/2) {
			g.log.Debug("gate: keep-alive stream answers nothing; opening another", "worker", g.id)
			rs.close()
			rs = nil
		}
		if rs == nil {
			rs = g.openRenewals()
		}
		gap := g.renewGap()
		slack := gap - g.period
		if asked && rs != nil && rs.inFlight(slack) {
			continue // its answer is the one asked for; the timer runs on
		}
		if rs != nil && !g.faults.renewalsStopped() && !rs.send(g.now(), clientv3.LeaseID(g.lease.Load()), slack) {
			rs.close()
			rs = nil
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(max(0, now+jittered(gap)-g.now()))
	}
}

// jittered is the time to the next renewal: gap less up to an eighth of
// it. Never more than gap, which the phases' timings assume.
func jittered(gap time.Duration) time.Duration {
	return gap - rand.N(gap/8+1)
}

// renewals is one keep-alive stream and the send times of the renewals
// sent on it and not yet answered, oldest first.
type renewals struct {
	g      *Gate
	st     pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
	done   chan struct{} // closed when the receiver returns

	mu      sync.Mutex
	pending []renewal
}

// renewal is one keep-alive request in flight.
type renewal struct {
	sent  time.Duration
	lease clientv3.LeaseID
	slack time.Duration // how much more than a period it allowed until the next
}

// openRenewals opens a stream and starts its receiver; nil if etcd did not
// take it within a period (the next tick tries again).
func (g *Gate) openRenewals() *renewals {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(g.ctx))
	timer := time.AfterFunc(g.period, cancel)
	st, err := pb.NewLeaseClient(g.cli.ActiveConnection()).LeaseKeepAlive(ctx, grpc.WaitForReady(true))
	if !timer.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		if g.ctx.Err() == nil {
			g.log.Debug("gate: keep-alive stream could not be opened", "worker", g.id, "err", err)
		}
		return nil
	}
	rs := &renewals{g: g, st: st, cancel: cancel, done: make(chan struct{})}
	g.wg.Go(rs.receive)
	return rs
}

// send asks etcd to renew lease; it reports false if the stream is broken.
func (rs *renewals) send(sent time.Duration, lease clientv3.LeaseID, slack time.Duration) bool {
	select {
	case <-rs.done:
		return false
	default:
	}
	rs.g.sent.Add(1)
	rs.mu.Lock()
	rs.pending = append(rs.pending, renewal{sent, lease, slack})
	rs.mu.Unlock()
	// Send is not called concurrently: only the keep-alive loop sends.
	if err := rs.st.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease)}); err != nil {
		if rs.g.ctx.Err() == nil {
			rs.g.log.Debug("gate: keep-alive failed", "worker", rs.g.id, "err", err)
		}
		return false
	}
	return true
}

// receive matches each answer with the oldest renewal in flight until the
// stream ends.
func (rs *renewals) receive() {
	defer close(rs.done)
	g := rs.g
	for {
		resp, err := rs.st.Recv()
		if err != nil {
			if g.ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				g.log.Debug("gate: keep-alive stream ended", "worker", g.id, "err", err)
			}
			return
		}
		rs.mu.Lock()
		if len(rs.pending) == 0 {
			rs.mu.Unlock()
			continue // not ours: etcd answers only what was sent
		}
		r := rs.pending[0]
		rs.pending = rs.pending[1:]
		rs.mu.Unlock()
		if r.lease != clientv3.LeaseID(g.lease.Load()) || clientv3.LeaseID(resp.ID) != r.lease {
			continue // the lease was replaced since
		}
		if resp.TTL <= 0 {
			g.lost.Store(int64(r.lease))
			kick(g.kaLost)
			continue
		}
		// Dated at the renewal's send: etcd read the revision no earlier,
		// and a watch it proves may have missed a version written after
		// that (see LastAnswer).
		g.answered.Store(&Answer{At: g.epoch.Add(r.sent), Revision: resp.Header.GetRevision()})
		g.contact(r.sent, r.slack, 0)
	}
}

// inFlight reports whether a renewal is awaiting its answer that allowed
// no more slack than slack.
func (rs *renewals) inFlight(slack time.Duration) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.pending) > 0 && rs.pending[len(rs.pending)-1].slack <= slack
}

// stalled reports whether the oldest renewal in flight has waited longer
// than d, or the stream has ended.
func (rs *renewals) stalled(now, d time.Duration) bool {
	select {
	case <-rs.done:
		return true
	default:
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.pending) > 0 && now-rs.pending[0].sent > d
}

// close ends the stream and waits for its receiver; nil is a no-op.
func (rs *renewals) close() {
	if rs == nil {
		return
	}
	rs.cancel()
	<-rs.done
}
