package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestReaperWaitsForMember: the supervisor's own client, given a user,
// waits for a member that is down for longer than etcd's client waits
// for a login (5 s), as the workers' joins do, and connects once the
// member is back; before, it gave up after the 5 s and dead workers' rows
// stayed until their leases expired.
func TestReaperWaitsForMember(t *testing.T) {
	c := testetcd.StartCluster(t, 1, embedded.Config{})
	c.Stop(0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	done := make(chan error, 1)
	go func() {
		r, err := dialReaper(context.Background(), gateway.ClusterOptions{Endpoints: c.Endpoints(), Username: "fleet", Password: "pw-fleet", Prefix: "/reconf/reconfd"}, log)
		r.close()
		done <- err
	}()
	time.Sleep(6 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("the reaper's client returned while the member was down: %v", err)
	default:
	}
	if err := c.Restart(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the reaper's client after the member came back: %v", err)
	}
}
