package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reconfhq/reconf/propagate"
)

// joinWait is one join's wait for etcd. A member that is down or slow is
// waited for, with pauses, up to gateJoinTimeout: a fleet's start-up
// storm, or a fleet that starts before its etcd, is waited out rather than
// turned into restarts of the worker. A fault that no retry cures ends the
// wait at once: etcd refusing the user, or a fault of TLS, which etcd's
// client reports only as the wait running out and which the probe beside
// the wait finds.
type joinWait struct {
	c ClusterOptions
	// wait bounds the join (gateJoinTimeout).
	wait time.Duration
	// ctx is the join's: it ends with gateJoinTimeout, with the caller's
	// context, or with the probe's verdict (fctx's cause).
	ctx    context.Context
	fctx   context.Context
	fail   context.CancelCauseFunc
	cancel context.CancelFunc
	stop   func() // stops the probe and waits for it
}

// startJoinWait starts the wait of a join to c's cluster, bounded by
// wait, and the probe of its members' TLS beside it. The caller calls end.
func startJoinWait(ctx context.Context, c ClusterOptions, wait time.Duration) *joinWait {
	w := &joinWait{c: c, wait: wait, stop: func() {}}
	w.fctx, w.fail = context.WithCancelCause(ctx)
	w.ctx, w.cancel = context.WithTimeout(w.fctx, wait)
	if p, ok := newTLSProbe(c); ok {
		pctx, stop := context.WithCancel(w.ctx)
		done := make(chan struct{})
		go func() { defer close(done); p.watch(pctx, w.fail) }()
		w.stop = func() { stop(); <-done }
	}
	return w
}

// end stops the probe and releases the wait's contexts.
func (w *joinWait) end() {
	w.stop()
	w.cancel()
	w.fail(nil)
}

// permanent returns the fault no retry cures, if err is one: the
// probe's, or etcd's refusal of the user (cli, when set, is the client
// that met it); or, once the wait has run out, the join's giving up.
func (w *joinWait) permanent(cli *clientv3.Client, err error) (error, bool) {
	if cause := context.Cause(w.fctx); errors.As(cause, new(*ClusterTLSError)) {
		// One *ClusterTLSError per member, each naming its own.
		return cause, true
	}
	if f, ok := authFault(w.c, cli, err); ok {
		return f, true
	}
	if w.fctx.Err() == nil && errors.Is(w.ctx.Err(), context.DeadlineExceeded) {
		eps := w.c.Endpoints
		if len(eps) == 0 && cli != nil {
			eps = cli.Endpoints()
		}
		return &ClusterUnreachableError{Endpoints: eps, Wait: w.wait, Err: err}, true
	}
	return err, false
}

// connect makes the join's etcd client from c's endpoints and access
// (see connect), failing with the fault no retry cures.
func (w *joinWait) connect(log *slog.Logger) (*clientv3.Client, error) {
	c := w.c
	cc := propagate.ClientConfig{Endpoints: c.Endpoints, TLS: c.TLS, Username: c.Username, Password: c.Password}
	cli, err := connect(w.ctx, cc, log)
	if err != nil {
		if f, ok := w.permanent(nil, err); ok {
			return nil, f
		}
		return nil, fmt.Errorf("gateway: connect to the cluster: %w", err)
	}
	return cli, nil
}

// ConnectCluster connects to c's cluster as a worker's join does, for a
// process of the fleet that is not a worker (a supervisor removes its dead
// workers' rows): it returns once etcd has answered a read of the
// channel's record under c.Prefix. It waits up to 30 s for a member that
// is down, slow or without a leader, and fails at once with a
// *ClusterTLSError or a *ClusterAuthError, the reasons a worker's join
// gives, when no retry can cure the fault, and with a
// *ClusterUnreachableError when the wait runs out. c.Client is not used.
// The caller closes the client.
func ConnectCluster(ctx context.Context, c ClusterOptions, log *slog.Logger) (*clientv3.Client, error) {
	return connectCluster(ctx, c, log, gateJoinTimeout)
}

// connectCluster is ConnectCluster waiting up to wait.
func connectCluster(ctx context.Context, c ClusterOptions, log *slog.Logger, wait time.Duration) (*clientv3.Client, error) {
	if len(c.Endpoints) == 0 {
		return nil, errors.New("gateway: a cluster needs at least one etcd endpoint")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultClusterPrefix
	}
	c.Client = nil
	w := startJoinWait(ctx, c, wait)
	defer w.end()
	cli, err := w.connect(log)
	if err != nil {
		return nil, err
	}
	if err := w.read(cli); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return cli, nil
}

// read reads the channel's record until etcd answers, as a worker's join
// does first: without a user the client has not met a member yet.
func (w *joinWait) read(cli *clientv3.Client) error {
	ch, err := propagate.NewChannel(cli, w.c.Prefix, propagate.WithGrantPrefixes(WorkerPrefixes(w.c.Prefix)...))
	if err != nil {
		return err
	}
	for {
		_, _, err := ch.Latest(w.ctx)
		if err == nil || !errors.Is(err, propagate.ErrUnreachable) {
			// Answered: a record this process cannot read is its workers'
			// to report.
			return nil
		}
		if f, ok := w.permanent(cli, err); ok {
			return f
		}
		// A read that fails at once (an error that is no wait) is not
		// tried again at once.
		t := time.NewTimer(readPause)
		select {
		case <-w.ctx.Done():
			t.Stop()
			if f, ok := w.permanent(cli, err); ok {
				return f
			}
			return fmt.Errorf("gateway: connect to the cluster: %w", err)
		case <-t.C:
		}
	}
}

// readPause is the pause between ConnectCluster's reads.
const readPause = 100 * time.Millisecond

// connectPauseMax bounds the pause between connect's attempts.
const connectPauseMax = 2 * time.Second

// connect makes the worker's etcd client. With a user, etcd's client logs
// in before it returns, and gives up when no member has answered within
// its dial timeout (5 s): connect tries again, after a jittered, doubling
// pause, while the fault may pass (no member answers, or none has a
// leader), until ctx ends. A refused login, or any other answer, is
// returned at once. Without a user it returns at once: the client waits
// for a member on its first call.
func connect(ctx context.Context, cc propagate.ClientConfig, log *slog.Logger) (*clientv3.Client, error) {
	pause := 100 * time.Millisecond
	var last error // the last login that failed on its own, not cut by ctx
	for {
		// The client's own context ends with ctx while it logs in, so a
		// join that gives up (or that the probe fails) ends the login's
		// wait at once; a client that connected outlives ctx, until Close.
		cctx, end := context.WithCancel(context.WithoutCancel(ctx))
		detach := context.AfterFunc(ctx, end)
		cc.Context = cctx
		cli, err := propagate.ConnectWith(cc, log)
		if err == nil {
			if !detach() {
				// ctx ended as the login succeeded: cctx has ended too.
				_ = cli.Close()
				return nil, context.Cause(ctx)
			}
			context.AfterFunc(cli.Ctx(), end)
			return cli, nil
		}
		detach()
		end()
		if ctx.Err() != nil {
			return nil, gaveUp(ctx, last)
		}
		if !loginMayPass(err) {
			return nil, err
		}
		last = err
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, gaveUp(ctx, last)
		case <-t.C:
		}
		pause = min(2*pause, connectPauseMax)
	}
}

// gaveUp is connect's error when ctx ends: its cause, with the last
// failed login's error, which says more (a refused connection, no leader)
// than the deadline that ended the wait.
func gaveUp(ctx context.Context, last error) error {
	if last == nil {
		return context.Cause(ctx)
	}
	return fmt.Errorf("%w; the last login: %v", context.Cause(ctx), last)
}

// loginMayPass reports whether a failed login is etcd not answering (yet)
// rather than refusing: no member reached within the client's dial
// timeout, or members without a leader.
func loginMayPass(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
		return true
	}
	for _, late := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrTooManyRequests, rpctypes.ErrTimeoutWaitAppliedIndex} {
		if errors.Is(err, late) {
			return true
		}
	}
	return false
}
