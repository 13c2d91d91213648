//go:build unix

package source

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reconfhq/reconf"
)

type rtConfig struct {
	Listen string `yaml:"listen" reconf:"restart"`
	Limit  int    `yaml:"limit" reconf:"live"`
}

// newFileRuntime starts a runtime over a real file holding limit 1, closed
// when the test ends, and returns the file's path.
func newFileRuntime(t *testing.T, opts ...reconf.Option) (string, *reconf.Runtime[rtConfig]) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeAtomic(t, path, "listen: :8080\nlimit: 1\n")
	src, err := File(path)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]reconf.Option{reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	rt, err := reconf.New[rtConfig](context.Background(), src, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return path, rt
}

// TestRuntimeKeepsGenerationOnEveryIntegrityFailure drives a real runtime
// over a real file through every failure reason, each provoked on disk,
// and checks after each that the active generation and its configuration
// are exactly as before; then a proper atomic replacement publishes.
func TestRuntimeKeepsGenerationOnEveryIntegrityFailure(t *testing.T) {
	path, rt := newFileRuntime(t, reconf.WithMaxSourceBytes(1024))

	steps := []struct {
		name    string
		provoke func(t *testing.T)
		outcome reconf.Outcome
		reason  reconf.Reason
	}{
		{"in-place rewrite", func(t *testing.T) {
			if err := os.WriteFile(path, []byte("listen: :8080\nlimit: 2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, reconf.SourceIntegrityFailed, reconf.ReasonSourceNonAtomic},
		{"missing", func(t *testing.T) {
			if err := os.Rename(path, path+".away"); err != nil {
				t.Fatal(err)
			}
		}, reconf.SourceIntegrityFailed, reconf.ReasonSourceMissing},
		{"directory", func(t *testing.T) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, reconf.SourceIntegrityFailed, reconf.ReasonSourceNotRegular},
		{"fifo", func(t *testing.T) {
			_ = os.Remove(path)
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, reconf.SourceIntegrityFailed, reconf.ReasonSourceNotRegular},
		{"oversize", func(t *testing.T) {
			_ = os.Remove(path)
			writeAtomic(t, path, "listen: :8080\nlimit: 3\n#"+strings.Repeat("x", 2000)+"\n")
		}, reconf.SourceIntegrityFailed, reconf.ReasonSourceOversize},
		{"unstable", func(t *testing.T) {
			writeAtomic(t, path, "listen: :8080\nlimit: 4\n")
			afterReadHook = func() { // runs on the attempt's goroutine: no t.Fatal
				_ = os.WriteFile(path+".race", []byte("listen: :8080\nlimit: 5\n"), 0o644)
				_ = os.Rename(path+".race", path)
			}
		}, reconf.SourceIntegrityFailed, reconf.ReasonSourceUnstable},
		{"multi-document", func(t *testing.T) {
			afterReadHook = nil
			writeAtomic(t, path, "listen: :8080\nlimit: 6\n---\nlimit: 7\n")
		}, reconf.Invalid, reconf.ReasonMultiDocument},
		{"trailing content", func(t *testing.T) {
			writeAtomic(t, path, "listen: :8080\nlimit: 6\n...\n]\n")
		}, reconf.Invalid, reconf.ReasonTrailingContent},
		{"malformed", func(t *testing.T) {
			writeAtomic(t, path, "listen: :8080\nlimit: [6\n")
		}, reconf.Invalid, reconf.ReasonMalformed},
		{"unknown field", func(t *testing.T) {
			writeAtomic(t, path, "listen: :8080\nlimit: 6\nlimt: 7\n")
		}, reconf.Invalid, reconf.ReasonUnknownField},
	}
	t.Cleanup(func() { afterReadHook = nil })
	for _, st := range steps {
		st.provoke(t)
		res, err := rt.Reload(context.Background(), reconf.TriggerSDK)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if res.Outcome != st.outcome || res.Reason != st.reason {
			t.Fatalf("%s: got %s/%s (%s), want %s/%s", st.name, res.Outcome, res.Reason, res.Message, st.outcome, st.reason)
		}
		if g := rt.Current(); g.ID() != 1 || g.Config().Limit != 1 {
			t.Fatalf("%s: active generation changed to %d (limit %d)", st.name, g.ID(), g.Config().Limit)
		}
	}

	// The operator's fix: a temporary file renamed over the path.
	writeAtomic(t, path, "listen: :8080\nlimit: 8\n")
	res, _ := rt.Reload(context.Background(), reconf.TriggerSDK)
	if res.Outcome != reconf.Published || rt.Current().Config().Limit != 8 {
		t.Fatalf("atomic replacement: %s %s", res.Outcome, res.Message)
	}
	// The same file again is a no-op.
	if res, _ := rt.Reload(context.Background(), reconf.TriggerSDK); res.Outcome != reconf.NoOp {
		t.Fatalf("unchanged file: %s", res.Outcome)
	}
}

// TestRuntimeConfigMapSwap publishes through a Kubernetes-style symlink
// swap: config.yaml -> ..data/config.yaml, ..data -> a timestamped
// directory, replaced by renaming a new symlink over ..data.
func TestRuntimeConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mk := func(stamp, data string) {
		d := filepath.Join(dir, stamp)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "config.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(stamp, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	mk("..2026_12_02_00_00_00.1", "listen: :8080\nlimit: 1\n")
	if err := os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	src, _ := File(filepath.Join(dir, "config.yaml"))
	rt, err := reconf.New[rtConfig](context.Background(), src, reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	for i, limit := range []string{"2", "3"} {
		mk("..2026_12_02_00_00_0"+limit+".1", "listen: :8080\nlimit: "+limit+"\n")
		res, _ := rt.Reload(context.Background(), reconf.TriggerSDK)
		if res.Outcome != reconf.Published || res.Generation != uint64(i+2) {
			t.Fatalf("swap %d: %s %s", i, res.Outcome, res.Message)
		}
	}
}

// TestRuntimeRefusesInPlaceRewriteAfterFailedAttempt is the scenario that
// used to publish: a bad file renamed in (invalid), then rewritten in place
// with good content. The rewrite is compared with the file last read, not
// with the one last published, so it is refused; read again unchanged it
// fails the same way, never a no-op while the active configuration differs
// from the file.
func TestRuntimeRefusesInPlaceRewriteAfterFailedAttempt(t *testing.T) {
	path, rt := newFileRuntime(t)
	reload := func(step string, outcome reconf.Outcome, reason reconf.Reason) {
		t.Helper()
		res, err := rt.Reload(context.Background(), reconf.TriggerSDK)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if res.Outcome != outcome || res.Reason != reason {
			t.Fatalf("%s: got %s/%s (%s), want %s/%s", step, res.Outcome, res.Reason, res.Message, outcome, reason)
		}
	}

	writeAtomic(t, path, "listen: :8080\nlimit: [2\n")
	reload("bad file renamed in", reconf.Invalid, reconf.ReasonMalformed)
	reload("bad file unchanged", reconf.Invalid, reconf.ReasonMalformed)

	if err := os.WriteFile(path, []byte("listen: :8080\nlimit: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reload("rewritten in place", reconf.SourceIntegrityFailed, reconf.ReasonSourceNonAtomic)
	reload("rewritten file unchanged", reconf.SourceIntegrityFailed, reconf.ReasonSourceNonAtomic)
	if lim := rt.Current().Config().Limit; lim != 1 {
		t.Fatalf("active limit = %d, want 1", lim)
	}

	writeAtomic(t, path, "listen: :8080\nlimit: 3\n")
	reload("atomic replacement", reconf.Published, reconf.ReasonPublished)
	reload("unchanged", reconf.NoOp, reconf.ReasonUnchanged)
}
