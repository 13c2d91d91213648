//go:build unix

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterMixedSchemesRefused: a cluster list that mixes http:// and
// https:// (etcd's client would speak the first one's scheme to every
// member) is refused before anything is dialled, on the command line
// (serve, supervised or not, and check-config: exit 2) and in the file's
// server.cluster (exit 1), naming the endpoints and the reason.
func TestClusterMixedSchemesRefused(t *testing.T) {
	requireBinary(t)
	const mixed = "https://127.0.0.1:1,http://127.0.0.1:2"
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.yaml")
	writeAtomic(t, plain, config(4, "0s"))
	inFile := filepath.Join(dir, "cluster.yaml")
	writeAtomic(t, inFile, strings.Replace(config(4, "0s"), "server:\n", "server:\n  cluster: [\"https://127.0.0.1:1\", \"http://127.0.0.1:2\"]\n", 1))
	for _, tc := range []struct {
		name string
		code int
		want string
		args []string
	}{
		{"serve", 2, "--cluster: the etcd endpoints " + mixed, []string{"serve", "--config", plain, "--cluster", mixed}},
		{"serve, supervised", 2, "--cluster: the etcd endpoints " + mixed, []string{"serve", "--config", plain, "--workers", "2", "--cluster", mixed}},
		{"check-config", 2, "--cluster: the etcd endpoints " + mixed, []string{"check-config", "--config", plain, "--cluster", mixed}},
		{"the file's server.cluster", 1, "server.cluster", []string{"serve", "--config", inFile, "--workers", "2"}},
	} {
		start := time.Now()
		code, out, errOut := reconfd(t, nil, tc.args...)
		all := out + errOut
		switch {
		case code != tc.code || !strings.Contains(all, tc.want) || !strings.Contains(all, "(cluster_endpoints_mixed_schemes)"):
			t.Errorf("%s: exit %d, want %d with %q and the reason: %s", tc.name, code, tc.code, tc.want, all)
		case time.Since(start) > 10*time.Second:
			t.Errorf("%s: took %s, want a refusal before any dial", tc.name, time.Since(start))
		}
	}
}
