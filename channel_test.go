package reconf

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// faultChannel is an in-memory Channel for fault injection in this
// package's tests (a superseded publish, a record naming a different
// file). The real channel is propagate's, tested against a real etcd.
type faultChannel struct {
	mu       sync.Mutex
	version  uint64
	rec      fleet.Record
	publishs int
	racer    *fleet.Record // if set, the next Publish loses to it
}

func (c *faultChannel) Join(_ context.Context, local fleet.Record) (uint64, fleet.Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version == 0 {
		c.version, c.rec = 1, local
	}
	return c.version, c.rec, nil
}

func (c *faultChannel) Publish(_ context.Context, held uint64, rec fleet.Record) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publishs++
	if c.racer != nil {
		c.version, c.rec, c.racer = c.version+1, *c.racer, nil
	}
	if held != c.version {
		return 0, Errorf(reasons.Superseded, "version %d was superseded", held)
	}
	c.version, c.rec = held+1, rec
	return c.version, nil
}

func (c *faultChannel) current() (uint64, fleet.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version, c.rec
}

type clusterConfig struct {
	Server struct {
		Address string `yaml:"address"`
	} `yaml:"server" reconf:"restart"`
	Limits  map[string]int `yaml:"limits" reconf:"live"`
	Backend struct {
		Name   string `yaml:"name"`
		Key    Secret `yaml:"api_key"`
		Prompt string `yaml:"system_prompt_file" reconf:",file"`
	} `yaml:"backend" reconf:"live"`
}

func newClusterWorker(t *testing.T, ch fleet.Channel, data string, env map[string]string, opts ...Option) (*Runtime[clusterConfig], *memSource) {
	t.Helper()
	src := newMem(data)
	rt, err := New[clusterConfig](context.Background(), src, append([]Option{withChannel(ch),
		WithLogger(discardLogger()),
		WithEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt, src
}

func TestClusterJoinPublishApply(t *testing.T) {
	dir := t.TempDir()
	prompt := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(prompt, []byte("be brief"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := func(limit int, extra string) string {
		return "server:\n  address: a\nlimits:\n  stub: " + strconv.Itoa(limit) + "\n" + extra + "backend:\n  name: b\n  api_key: ${env:KEY}\n  system_prompt_file: " + prompt + "\n"
	}
	ch := &faultChannel{}
	env := map[string]string{"KEY": "canary-value"}
	a, srcA := newClusterWorker(t, ch, doc(4, "  other: 1\n"), env)
	if a.Current().ID() != 1 {
		t.Fatalf("first worker starts at %d, want 1", a.Current().ID())
	}
	// A late worker with an older file joins at the cluster's version and
	// its live fields, keeping its own bootstrap fields.
	b, _ := newClusterWorker(t, ch, doc(2, ""), env)
	if b.Current().ID() != 1 || b.Current().Config().Limits["stub"] != 4 || b.Current().Config().Limits["other"] != 1 {
		t.Fatalf("late worker: id %d limits %v", b.Current().ID(), b.Current().Config().Limits)
	}
	// Worker a publishes version 2: the record replaces maps whole, so the
	// removed key is gone on b too.
	srcA.set(doc(8, ""))
	res := mustReloadC(t, a, Published)
	if res.Generation != 2 {
		t.Fatalf("published as %d", res.Generation)
	}
	v, rec := ch.current()
	if strings.Contains(string(rec.Live), "canary-value") || !strings.Contains(string(rec.Live), "${env:KEY}") {
		t.Fatalf("record live fields = %s", rec.Live)
	}
	if rec.Files["backend.system_prompt_file"] == "" {
		t.Fatalf("record lacks the prompt digest: %+v", rec.Files)
	}
	ares, err := b.applyVersion(context.Background(), v, rec)
	if err != nil || ares.Outcome != Published || ares.Generation != 2 {
		t.Fatalf("apply = %+v, %v", ares, err)
	}
	if got := b.Current().Config().Limits; len(got) != 1 || got["stub"] != 8 {
		t.Fatalf("limits after apply = %v", got)
	}
	if b.Current().Config().Backend.Key.Reveal() != "canary-value" {
		t.Fatal("reference not resolved locally")
	}
	// Stale and repeated versions are no-ops.
	if res, _ := b.applyVersion(context.Background(), 2, rec); res.Outcome != NoOp || res.Reason != reasons.Stale {
		t.Fatalf("stale apply = %+v", res)
	}
	// The same content under a newer number still moves to that number.
	if res, _ := b.applyVersion(context.Background(), 3, rec); res.Outcome != Published || b.Current().ID() != 3 {
		t.Fatalf("same-content apply = %+v", res)
	}

	// A prompt file that differs here refuses the version whole.
	bad := rec
	bad.Files = map[string]string{"backend.system_prompt_file": "0000"}
	if res, _ := b.applyVersion(context.Background(), 4, bad); res.Outcome != Invalid || res.Reason != reasons.DigestMismatch || b.Current().ID() != 3 {
		t.Fatalf("digest mismatch apply = %+v", res)
	}
}

func TestClusterSupersededAndSecrets(t *testing.T) {
	ch := &faultChannel{}
	doc := "server:\n  address: a\nlimits:\n  stub: 1\nbackend:\n  name: b\n  api_key: ${env:KEY}\n"
	a, srcA := newClusterWorker(t, ch, doc, map[string]string{"KEY": "x"})
	_, winner := ch.current()
	ch.mu.Lock()
	ch.racer = &winner
	ch.mu.Unlock()
	srcA.set(strings.Replace(doc, "stub: 1", "stub: 2", 1))
	res := mustReloadC(t, a, Busy)
	if res.Reason != reasons.Superseded || a.Current().ID() != 1 || a.Current().Config().Limits["stub"] != 1 {
		t.Fatalf("superseded = %+v", res)
	}

	// A literal secret cannot travel.
	srcA.set(strings.Replace(doc, "${env:KEY}", "literal-canary", 1))
	res = mustReloadC(t, a, Invalid)
	if res.Reason != reasons.SecretNotPropagate || strings.Contains(res.Message, "literal-canary") || !strings.Contains(res.Message, "${env:NAME}") {
		t.Fatalf("literal secret = %+v", res)
	}

	// A worker that cannot resolve a reference refuses the version and
	// keeps its generation; it applies once it can.
	v, rec := ch.current()
	env := map[string]string{"KEY": "x"}
	b, _ := newClusterWorker(t, ch, doc, env)
	moved := rec
	moved.Live = []byte(strings.Replace(string(rec.Live), "${env:KEY}", "${env:OTHER}", 1))
	if res, _ := b.applyVersion(context.Background(), v+1, moved); res.Outcome != Invalid || res.Reason != ReasonSecretUnresolved || b.Current().ID() != v {
		t.Fatalf("unresolvable = %+v", res)
	}
}

func mustReloadC(t *testing.T, rt *Runtime[clusterConfig], want Outcome) Result {
	t.Helper()
	res, err := rt.Reload(context.Background(), TriggerSDK)
	if err != nil || res.Outcome != want {
		t.Fatalf("reload = %s (%s: %s) %v, want %s", res.Outcome, res.Reason, res.Message, err, want)
	}
	return res
}

// panickingChannel is a faultChannel whose Publish panics, as a broken
// Channel implementation would.
type panickingChannel struct{ faultChannel }

func (c *panickingChannel) Publish(context.Context, uint64, fleet.Record) (uint64, error) {
	panic("publish")
}

// stageCounts is a Prepared that counts its Commits and Aborts.
type stageCounts struct{ commits, aborts int }

func (s *stageCounts) Commit() { s.commits++ }
func (s *stageCounts) Abort()  { s.aborts++ }

// TestPanicInPublishAbortsThePrepared: a Channel that panics in Publish
// fails the attempt as internal-failed, and what the consumers prepared
// for it is aborted, not left staged.
func TestPanicInPublishAbortsThePrepared(t *testing.T) {
	var staged []*stageCounts
	c := ConsumerFunc[clusterConfig](func(context.Context, *clusterConfig, *clusterConfig) (Prepared, error) {
		s := &stageCounts{}
		staged = append(staged, s)
		return s, nil
	})
	rt, src := newClusterWorker(t, &panickingChannel{}, restartDoc("a", "1"), nil, WithConsumer(Key[any]("limits"), c, "limits"))
	src.set(restartDoc("a", "2"))
	res, err := rt.Reload(context.Background(), TriggerSDK)
	if err != nil || res.Outcome != InternalFailed {
		t.Fatalf("Reload = %s %s, %v; want internal-failed", res.Outcome, res.Reason, err)
	}
	if len(staged) != 2 {
		t.Fatalf("%d prepares, want 2 (startup, reload)", len(staged))
	}
	if s := staged[1]; s.aborts != 1 || s.commits != 0 {
		t.Errorf("the reload's stage: %d aborts, %d commits; want 1 abort", s.aborts, s.commits)
	}
}
