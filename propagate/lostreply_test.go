package propagate

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/propagate/internal/zlog"
)

// faultLostReply is fault injection, not a fake: a client interceptor
// that lets etcd run the next transaction and then drops its reply, as
// when the publishing worker is stopped (SIGSTOP) after sending it, or
// etcd is stopped between commit and reply. With cut set, every call
// after that dropped reply fails unsent (etcd unreachable from then on).
type faultLostReply struct {
	drop, cut, down atomic.Bool
}

func (f *faultLostReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if f.down.Load() {
		return status.Error(codes.Unavailable, "fault injection: etcd unreachable")
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if method == "/etcdserverpb.KV/Txn" && f.drop.CompareAndSwap(true, false) {
		// The reply never comes: the caller's deadline passes first.
		f.down.Store(f.cut.Load())
		<-ctx.Done()
		return status.Error(codes.DeadlineExceeded, ctx.Err().Error())
	}
	return err
}

// TestPublishReplyLost: etcd commits a publish whose reply never reaches
// the publisher. The publisher reads the key and answers with the version
// it wrote, instead of cluster_unavailable for a version every worker then
// applies (TestRobustnessFleet saw it: a SIGHUP answered
// preparation-failed 5 s after the other workers had applied its
// version). When the read fails too, the outcome is unknown and the
// publish is reported unavailable, as before.
func TestPublishReplyLost(t *testing.T) {
	s := startServer(t)
	fault := &faultLostReply{}
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second,
		Logger:      zlog.New(testLogger(), "etcd-client", slog.LevelError),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(fault.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ch, err := NewChannel(cli, newPrefix(), WithWorkerID("p"), WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := func(n string) fleet.Record {
		return fleet.Record{Live: []byte(`{"limits":{"stub":` + n + `}}`), Format: "json/1"}
	}
	if v, _, err := ch.Join(ctx, rec("1")); err != nil || v != 1 {
		t.Fatalf("Join: %d %v", v, err)
	}

	fault.drop.Store(true)
	v, err := ch.Publish(ctx, 1, rec("2"))
	if err != nil || v != 2 {
		t.Fatalf("a publish that etcd wrote but whose reply was lost: got version %d, %v; want version 2", v, err)
	}
	if u, _, err := ch.Latest(ctx); err != nil || u.Version != 2 || string(u.Record.Live) != string(rec("2").Live) {
		t.Fatalf("the channel holds %+v, %v", u, err)
	}

	// The reply is lost and the read that would tell fails too: unknown,
	// reported as unavailable.
	fault.cut.Store(true)
	fault.drop.Store(true)
	v, err = ch.Publish(ctx, 2, rec("3"))
	if !errors.Is(err, ErrUnreachable) || v != 0 {
		t.Fatalf("reply and read both lost: got version %d, %v; want an unreachable error", v, err)
	}
}
