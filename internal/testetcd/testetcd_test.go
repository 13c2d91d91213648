package testetcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/reconfhq/reconf/propagate/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// roundTrip writes a key through endpoints and reads it back.
func roundTrip(t *testing.T, endpoints []string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/testetcd/k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	got, err := cli.Get(ctx, "/testetcd/k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v %v, want v", got, err)
	}
}

func TestStartServesAndClosesWithTheTest(t *testing.T) {
	var s *embedded.Server
	t.Run("member", func(t *testing.T) {
		s = Start(t, embedded.Config{})
		roundTrip(t, s.Endpoints())
	})
	if s.Running() {
		t.Fatal("the member still runs after its test ended")
	}
}

func TestStartClusterServes(t *testing.T) {
	c := StartCluster(t, 1, embedded.Config{})
	roundTrip(t, c.Endpoints())
}
