package propagate

import (
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/propagate/internal/zlog"
)

// Connect returns an etcd client for endpoints (for example the embedded
// member's, or an external cluster's "http://h1:2379,..."). Its logs go to
// logger (nil means slog.Default()) at error level; its gRPC keep-alives
// notice a dead endpoint within seconds so the client moves to another.
// It does not wait for a connection. The caller closes the client after
// every Follower using it.
func Connect(endpoints []string, logger *slog.Logger) (*clientv3.Client, error) {
	if logger == nil {
		logger = slog.Default()
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		MaxCallSendMsgSize:   8 << 20,
		MaxCallRecvMsgSize:   8 << 20,
		Logger:               zlog.New(logger, "etcd-client", slog.LevelError),
	})
}
