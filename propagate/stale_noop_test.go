package propagate

import (
	"context"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
)

// TestStaleWorkerFileUnchangedIsNotNoOp: a worker behind the cluster (here
// it follows nothing; in a fleet it was stopped, cut off or still
// applying) whose file equals the version it holds must not answer
// no-op: the fleet runs a newer version, so the file is not in force. It
// answers busy (superseded), and no-op again once it holds the cluster's
// version. TestRobustnessFleet found it: a worker continued after a
// SIGSTOP answered a SIGHUP no-op for a file that the fleet never ran.
func TestStaleWorkerFileUnchangedIsNotNoOp(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})

	// b joins at version 1 and follows nothing: it stays there.
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ch, err := NewChannel(cli, p, WithWorkerID("b"))
	if err != nil {
		t.Fatal(err)
	}
	src := &memSource{}
	src.Set(configYAML("gw", 1, "KEY1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := reconf.New[testConfig](ctx, src, ch.Option(), reconf.WithEnv(newEnv("KEY1", canary).Lookup), reconf.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	a.reload(t, configYAML("gw", 2, "KEY1"))

	res, err := b.Reload(ctx, reconf.TriggerSDK)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != reconf.Busy || res.Reason != reasons.Superseded {
		t.Fatalf("a worker at version %d, the cluster at 2, file equal to its version: got %s (%s) %q; want busy (superseded)",
			b.Current().ID(), res.Outcome, res.Reason, res.Message)
	}
	// a, current, still answers no-op for its unchanged file.
	if res := a.reload(t, configYAML("gw", 2, "KEY1")); res.Outcome != reconf.NoOp || res.Reason != reconf.ReasonUnchanged {
		t.Fatalf("a worker at the cluster's version, file unchanged: got %s (%s)", res.Outcome, res.Reason)
	}
}
