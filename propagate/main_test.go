package propagate

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests (every etcd member,
// client and follower is stopped; no etcd goroutine needed ignoring) and
// that the secret canary never reached a log line of etcd, the client, a
// runtime or a follower.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	code := m.Run()
	if code == 0 {
		if strings.Contains(testLogs.String(), canary) {
			fmt.Fprintln(os.Stderr, "FAIL: the secret canary appears in the logs")
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
