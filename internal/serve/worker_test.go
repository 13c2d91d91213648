package serve

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/lifecycle"
)

// workerTestConfig is a configuration a worker loads.
const workerTestConfig = `
server:
  address: 127.0.0.1:0
backends:
  - name: stub
    kind: stub
    model: stub-1
routing:
  default_route: stub
`

// A worker stopped during its start-up says why: by a signal, or by its
// supervisor because another worker could not start (the supervisor's
// stop mark says so), which is not an operator's doing.
func TestWorkerStoppedDuringStartupSaysWhy(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "reconfd.yaml")
	if err := os.WriteFile(cfg, []byte(workerTestConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct{ mark, want string }{
		{"", "stopped during start-up by a signal"},
		{"worker-failed", "the supervisor stopped this worker because another worker could not start"},
	} {
		mark := filepath.Join(dir, "fleet-stopping")
		os.Remove(mark)
		if tc.mark != "" {
			if err := os.WriteFile(mark, []byte(tc.mark), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		w := &worker{f: Options{Config: cfg}, stderr: io.Discard, lookup: func(string) (string, bool) { return "", false },
			wenv: lifecycle.WorkerEnv{StopMark: mark}}
		err := w.load(context.Background(), stopped, []gateway.Option{gateway.WithCluster(gateway.ClusterOptions{Endpoints: []string{"127.0.0.1:1"}})})
		var ee *exitcode.Error
		if !errors.As(err, &ee) || ee.Code != exitcode.OK || !strings.Contains(ee.Msg, tc.want) {
			t.Errorf("mark %q: got %v, want a clean exit saying %q", tc.mark, err, tc.want)
		}
	}
}
