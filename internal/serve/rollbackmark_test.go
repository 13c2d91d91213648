package serve

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRollbackStoreChoice(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	dir := filepath.Join(t.TempDir(), "state")
	var log bytes.Buffer
	if o, err := rollbackStore(Options{Config: "c.yaml", StateDir: dir}, none, &log); o == nil || err != nil {
		t.Fatalf("--state-dir: %v, %v", o, err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("--state-dir made before any mark is kept")
	}
	if o, err := rollbackStore(Options{Config: "c.yaml", StateDir: dir, Workers: 2}, none, &log); o == nil || err != nil {
		t.Errorf("a supervisor's fleet, whose embedded channel ends with it, got no state file: %v, %v", o, err)
	}
	if o, err := rollbackStore(Options{Config: "c.yaml", StateDir: dir, Cluster: []string{"http://127.0.0.1:2379"}}, none, &log); o != nil || err != nil {
		t.Errorf("an external cluster's process got a state file: %v, %v", o, err)
	}
	if o, err := rollbackStore(Options{Config: "c.yaml"}, none, &log); o != nil || err != nil || !strings.Contains(log.String(), "in memory only") {
		t.Errorf("no state directory known: %v, %v, %q", o, err, log.String())
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := rollbackStore(Options{Config: "c.yaml", StateDir: open}, none, &log); err == nil {
		t.Error("a state directory open to others was used")
	}
}
