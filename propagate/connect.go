package propagate

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/reconfhq/reconf/propagate/internal/zlog"
)

// Connect returns an etcd client for endpoints (for example the embedded
// member's, or an external cluster's "http://h1:2379,..."). Its logs go to
// logger (nil means slog.Default()) at error level; its gRPC keep-alives
// (a ping after 5 s without a message from etcd, answered within 2 s)
// notice a dead endpoint within 7 s, inside the gate's default lease
// time, so the client moves to another. A follower's watch hears from
// etcd every second (progress notifications), so at rest no pings are
// sent; a crashed member's closed connection is noticed at once. 5 s is
// also etcd's shortest ping interval by default (--grpc-keepalive-min-time).
// Reconnection backs off to at most one second (gRPC's default is two
// minutes), so after an etcd outage a worker is back well within a lease
// time: the concurrency gate's bound depends on that.
// It does not wait for a connection. The caller closes the client after
// every Follower using it.
func Connect(endpoints []string, logger *slog.Logger) (*clientv3.Client, error) {
	return ConnectWith(ClientConfig{Endpoints: endpoints}, logger)
}

// ClientConfig is how a worker reaches an external cluster: its
// endpoints, TLS for https:// endpoints, and etcd authentication. The
// password is a reconf secret resolved by the caller; it is never logged.
type ClientConfig struct {
	// Endpoints share one scheme, plain (http://, unix://) or TLS
	// (https://, unixs://): etcd's client speaks the first one's to
	// every member, so ConnectWith refuses a mix (EndpointSchemesError).
	Endpoints          []string
	TLS                *tls.Config
	Username, Password string
	// Context, when set, is the client's own: ending it ends the client's
	// calls as Close does. With a Username, ConnectWith logs in before it
	// returns and waits up to 5 s for a member to answer; ending Context
	// ends that wait at once (a join that has found a fault no wait
	// cures). Nil means the client lives until Close.
	Context context.Context
}

// ConnectWith is Connect with TLS and etcd authentication (see
// ClientConfig). Endpoints that mix plain and TLS schemes are refused
// with an *EndpointSchemesError before anything is dialled.
func ConnectWith(cc ClientConfig, logger *slog.Logger) (*clientv3.Client, error) {
	if err := CheckEndpointSchemes(cc.Endpoints); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	return clientv3.New(clientv3.Config{
		Context:              cc.Context,
		TLS:                  cc.TLS,
		Username:             cc.Username,
		Password:             cc.Password,
		Endpoints:            cc.Endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		MaxCallSendMsgSize:   8 << 20,
		MaxCallRecvMsgSize:   8 << 20,
		Logger:               zlog.New(logger, "etcd-client", slog.LevelError),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: time.Second,
			}),
			grpc.WithStaticStreamWindowSize(streamWindow),
			grpc.WithStaticConnWindowSize(connWindow),
		},
	})
}

// Flow-control windows of a client's connection (the embedded member
// fixes its own alike). Fixed windows turn off gRPC's bandwidth
// estimator, which answers nearly every message received on an idle
// connection with a ping of its own and its acknowledgement: at rest,
// when every message is a small notification or lease renewal, that
// doubled the frames (and the wake-ups and system calls) on both sides.
// A stream's window holds half of the largest message (8 MiB), more than
// the estimator reaches on a LAN; across a 50 ms round trip it still
// moves 80 MB/s per stream.
const (
	streamWindow = 4 << 20
	connWindow   = 8 << 20
)
