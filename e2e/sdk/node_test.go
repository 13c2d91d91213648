package sdk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// nodeFiles are what node/ holds for a run: the package, its lockfile and
// the test files.
var nodeFiles = []string{"package.json", "package-lock.json", "openai.test.mjs", "anthropic.test.mjs"}

// requireTool returns the path of a command, skipping the test without it,
// or failing it under CI, where a matrix that skips is a matrix that never
// ran.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("%s is not installed, and CI is set: the Node.js SDK matrix must run (.ci/run installs nodejs and npm)", name)
	}
	t.Skipf("%s is not installed; the Node.js SDK matrix needs it", name)
	return ""
}

// TestNode runs node/openai.test.mjs and node/anthropic.test.mjs, npm
// `openai` and `@anthropic-ai/sdk` over every endpoint they call, with
// node's test runner against a real reconfd. The package is
// installed with `npm ci` from the lockfile into a temporary directory, so
// the source tree gets no node_modules.
func TestNode(t *testing.T) {
	node, npm := requireTool(t, "node"), requireTool(t, "npm")
	s := startReconfd(t, matrixConfig)
	dir := t.TempDir()
	for _, f := range nodeFiles {
		b, err := os.ReadFile(filepath.Join("node", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	install.Dir = dir
	install.Env = cleanEnv()
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	// One file at a time: both use the narrow backend's single slot.
	run := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-reporter=spec", "openai.test.mjs", "anthropic.test.mjs")
	run.Dir = dir
	run.Env = append(cleanEnv(), "SDK_MATRIX_URL="+s.url+"/v1", "SDK_MATRIX_KEY="+apiKey, "NO_COLOR=1")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}
