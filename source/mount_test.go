//go:build unix

package source

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/history"
	"github.com/reconfhq/reconf/internal/testkit"
)

// mountConfig references a secret and a digested file under the mount
// its source is read from; each file carries the revision's marker.
type mountConfig struct {
	Marker string        `yaml:"marker" reconf:"live"`
	Key    reconf.Secret `yaml:"key" reconf:"live"`
	Prompt string        `yaml:"prompt" reconf:"live,file"`
}

// ValidateContext refuses a candidate whose three files come from two
// revisions: the source's marker, the secret and the file field's bytes
// must agree.
func (c *mountConfig) ValidateContext(ctx context.Context) error {
	prompt, err := reconf.FileContent(ctx, c.Prompt)
	if err != nil {
		return err
	}
	if c.Key.Reveal() != c.Marker || string(prompt) != c.Marker {
		return fmt.Errorf("mixed revisions")
	}
	return nil
}

func mountPayload(dir, marker string) map[string]string {
	return map[string]string{
		"config.yaml": fmt.Sprintf("marker: %s\nkey: ${file:%s}\nprompt: %s\n", marker, filepath.Join(dir, "key"), filepath.Join(dir, "prompt")),
		"key":         marker,
		"prompt":      marker,
	}
}

// swapAfterRead is a FileSource whose reads are followed by a kubelet
// swap (fault injection): the referenced files are read after the mount
// moved on.
type swapAfterRead struct {
	*FileSource
	after func()
}

func (s *swapAfterRead) Read(ctx context.Context, req reconf.ReadRequest) (reconf.Snapshot, error) {
	snap, err := s.FileSource.Read(ctx, req)
	if s.after != nil {
		s.after()
	}
	return snap, err
}

// TestMountOneRevisionPerGeneration swaps the mount between the source read
// and the reads of the files it references: the generation still holds the
// source's revision throughout, and records it. When the kubelet has
// already removed that revision, the attempt fails rather than mix.
func TestMountOneRevisionPerGeneration(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	k := testkit.NewKubelet(t, dir, 0o440, mountPayload(dir, "r1")) // a projected volume with a Secret: defaultMode 0440
	fs, err := File(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src := &swapAfterRead{FileSource: fs}
	h := history.New(0)
	rt, err := reconf.New[mountConfig](context.Background(), src, reconf.WithObserver(h),
		reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if got := rt.Status().Revisions[dir]; got != k.Revision() {
		t.Fatalf("status revision %q, want %q", got, k.Revision())
	}

	// r2 is on disk; the read sees it, then the kubelet moves to r3 while
	// the old directory still exists.
	r2 := k.Update(mountPayload(dir, "r2"))
	var removeOld func()
	src.after = func() { _, removeOld = k.Swap(mountPayload(dir, "r3")) }
	res, _ := rt.Reload(context.Background(), reconf.TriggerSDK)
	src.after = nil
	removeOld()
	if res.Outcome != reconf.Published || rt.Current().Config().Marker != "r2" {
		t.Fatalf("reload: %s %s %q (%v)", res.Outcome, res.Reason, res.Message, res.Problems)
	}
	if res.Revisions[dir] != r2 || rt.Status().Revisions[dir] != r2 {
		t.Fatalf("result names %v, status %v; want %s", res.Revisions, rt.Status().Revisions, r2)
	}
	if e := h.Entries(1)[0]; e.Revisions[dir] != r2 {
		t.Fatalf("history names %v, want %s", e.Revisions, r2)
	}

	// Now the kubelet finishes its swap (removing the read revision)
	// before the referenced files are read: refused, r2 stays.
	r4 := k.Update(mountPayload(dir, "r4"))
	src.after = func() { k.Update(mountPayload(dir, "r5")) }
	res, _ = rt.Reload(context.Background(), reconf.TriggerSDK)
	src.after = nil
	if res.Outcome != reconf.SourceIntegrityFailed || res.Reason != reconf.ReasonSourceUnstable {
		t.Fatalf("reload across a removed revision: %s %s %q", res.Outcome, res.Reason, res.Message)
	}
	if res.Revisions[dir] != r4 || rt.Current().Config().Marker != "r2" {
		t.Fatalf("failed reload names %v, active %q", res.Revisions, rt.Current().Config().Marker)
	}
	res, _ = rt.Reload(context.Background(), reconf.TriggerSDK)
	if res.Outcome != reconf.Published || rt.Current().Config().Marker != "r5" {
		t.Fatalf("next reload: %s %s", res.Outcome, res.Reason)
	}
}
