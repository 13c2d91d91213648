package gate

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// delayedRecv delays every answer of a keep-alive stream.
type delayedRecv struct {
	grpc.ClientStream
	d time.Duration
}

func (s delayedRecv) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	time.Sleep(s.d)
	return err
}

// TestLostLeaseRegrantedOnce: two renewals in flight are both answered
// "not found" for a lease etcd revoked; the second answer arrives while
// the first's new lease is being granted. The Gate takes one new lease,
// not two (before, the second answer asked for another regrant, which
// granted a second lease and counted a second rejoin: a second cut to
// the share and a lease left to expire).
func TestLostLeaseRegrantedOnce(t *testing.T) {
	c := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				s, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
					return s, err
				}
				return delayedRecv{s, 100 * time.Millisecond}, nil
			}),
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if strings.HasSuffix(method, "/LeaseGrant") {
					time.Sleep(150 * time.Millisecond)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := New(ctx, cli, WithTTL(10*time.Second), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	time.Sleep(300 * time.Millisecond) // the stream is open
	old := clientv3.LeaseID(g.lease.Load())
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	before := g.rejoins.Load()
	kick(g.kaKick)
	time.Sleep(20 * time.Millisecond)
	kick(g.kaKick)
	time.Sleep(2 * time.Second)
	if got := g.rejoins.Load() - before; got != 1 || clientv3.LeaseID(g.lease.Load()) == old {
		t.Fatalf("%d rejoins (lease %x, was %x), want one new lease", got, g.lease.Load(), old)
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) != 1 {
		t.Errorf("%d leases in etcd, want the gate's one: %+v", len(leases.Leases), leases.Leases)
	}
}
