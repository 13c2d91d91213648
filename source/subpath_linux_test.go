package source

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/testkit"
)

// subPathChild names the temporary directory the test's re-executed copy
// works in, inside a mount namespace of its own.
const subPathChild = "RECONF_TEST_SUBPATH_DIR"

// TestSubPathWarning mounts a ConfigMap's file on its own path with a real
// bind mount, as the kubelet does for a subPath, and expects the warning
// at start (in the log) and in status, and none for the same file read
// through the volume's directory. The mount lives in a mount namespace of
// the test's own: the test binary runs itself again under unshare -m.
// It needs root; without it the test skips, except in CI (CI=1) as root.
func TestSubPathWarning(t *testing.T) {
	if dir := os.Getenv(subPathChild); dir != "" {
		subPathInNamespace(t, dir)
		return
	}
	mustRun := os.Getenv("CI") == "1" && os.Geteuid() == 0
	if os.Geteuid() != 0 {
		t.Skip("needs root for a bind mount in a mount namespace")
	}
	if err := exec.Command("unshare", "-m", "--propagation", "private", "true").Run(); err != nil {
		if mustRun {
			t.Fatalf("CI runs as root but cannot make a mount namespace: %v", err)
		}
		t.Skipf("no mount namespace here: %v", err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0], "-test.run", "^TestSubPathWarning$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), subPathChild+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSubPathWarning") {
		t.Fatalf("the test in its mount namespace failed: %v\n%s", err, out)
	}
}

func subPathInNamespace(t *testing.T, dir string) {
	volume := filepath.Join(dir, "volume")
	k := testkit.NewKubelet(t, volume, 0, map[string]string{"config.yaml": "listen: :8080\nlimit: 1\n"})
	target := filepath.Join(dir, "etc", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The kubelet bind-mounts the key's file in the current revision.
	if err := unix.Mount(filepath.Join(volume, k.Revision(), "config.yaml"), target, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	defer unix.Unmount(target, 0)

	var logs bytes.Buffer
	src, err := File(target)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := reconf.New[rtConfig](context.Background(), src, reconf.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if w := rt.Status().Warnings; len(w) != 1 || w[0].Reason != ReasonSubPathMount {
		t.Fatalf("status warnings %v, want %s", w, ReasonSubPathMount)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), string(ReasonSubPathMount)) {
		t.Fatalf("no warning logged at start:\n%s", logs.String())
	}

	// The same file through the volume's directory: no warning.
	plain, err := File(filepath.Join(volume, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := plain.Read(context.Background(), reconf.ReadRequest{})
	if err != nil || len(snap.Warnings) != 0 {
		t.Fatalf("read through the volume: %v, warnings %v", err, snap.Warnings)
	}
}

// TestUnescapeMountinfo: a mount point with a space is listed as \040.
func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/etc/my\040app/config\134x.yaml`); got != `/etc/my app/config\x.yaml` {
		t.Fatalf("got %q", got)
	}
}
