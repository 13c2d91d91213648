package gate

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/internal/testkit"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestRefusedClaimsAreLoggedOnce: a worker whose etcd user is not granted
// the gate's prefix cannot read or write the claims, so it admits nothing
// on a limited backend. It said nothing (a refused read was not logged, a
// refused write only at debug level); it now logs one error per backend,
// naming the prefix to grant, however often etcd refuses it.
func TestRefusedClaimsAreLoggedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := testetcd.StartCluster(t, 1, embedded.Config{Dir: t.TempDir(), Logger: quiet, TickMs: 50, ElectionMs: 500, BcryptCost: 4})
	testetcd.EnableAuth(t, c.Endpoints(),
		[]testetcd.Role{{Name: "elsewhere", Ranges: []testetcd.Range{testetcd.Prefix("/elsewhere/")}}},
		[]testetcd.User{{Name: "worker", Password: "pw-worker", Roles: []string{"elsewhere"}}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Username: "worker", Password: "pw-worker", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.Buffer{}
	w := startWorkerOn(t, cli, WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	l := w.g.Limiter("b")
	l.SetLimit(2)
	// The backend reads and writes again every period (TTL/8): a dozen
	// refusals within the wait.
	actx, acancel := context.WithTimeout(ctx, 3*testTTL/2)
	_, err = l.Acquire(actx)
	acancel()
	if err == nil || l.Stats().Capacity != 0 {
		t.Fatalf("a worker refused its claims admitted a request (%v, %+v), want none", err, l.Stats())
	}
	const line = `msg="gate: etcd refused this worker's claims (permission denied); it admits no request on the backend`
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("%d refusal errors logged, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `level=ERROR`) || !strings.Contains(logs.String(), `grant=`+DefaultPrefix) {
		t.Errorf("the refusal is not an error naming the prefix to grant:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "pw-worker") {
		t.Error("the log shows the password")
	}
}
