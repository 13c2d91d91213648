package gate

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// lateAnswerFault delays each answer the lease's keep-alive stream
// receives by delay: fault injection for the dating of renewal answers.
func lateAnswerFault(delay time.Duration) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
			return s, err
		}
		return lateStream{s, delay}, nil
	}
}

type lateStream struct {
	grpc.ClientStream
	delay time.Duration
}

func (s lateStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	time.Sleep(s.delay)
	return err
}

// TestAnswerDatedAtSend: LastAnswer is dated when its renewal was sent.
// etcd read the revision it carries at some moment before the answer
// arrived, so a follower that takes it as a proof of its watch
// (propagate.WithLeaseAnswers) may not count it as covering anything
// after the send; dated on arrival, a late answer proved a watch for its
// round trip longer than it could.
func TestAnswerDatedAtSend(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const delay = 400 * time.Millisecond
	c := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(lateAnswerFault(delay))},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := startWorkerOn(t, cli).g
	g.Renew()
	var a Answer
	var seen time.Time
	if !eventually(5*time.Second, func() bool { a, seen = g.LastAnswer(), time.Now(); return !a.At.IsZero() }) {
		t.Fatal("no renewal was answered")
	}
	if late := seen.Sub(a.At); late < delay/2 {
		t.Fatalf("an answer that arrived %v after its renewal is dated %v before it was seen: dated on arrival", delay, late)
	}
}
