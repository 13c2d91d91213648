package propagate

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests (every etcd member,
// client and follower is stopped) and that the secret canary never reached
// a log line of etcd, the client, a runtime or a follower.
//
// One etcd goroutine is ignored, because etcd leaks it: when a member is
// stopped abruptly (Cluster.Stop, as a crash) while a peer asks its
// /version, the peer handler reads the storage version from a backend whose
// read transaction is already gone, panics holding the read-tx mutex,
// net/http recovers the panic (the peer server's error log is discarded),
// and the next /version request blocks on that mutex for ever. Seen once in
// about ten runs of TestThreeMemberCluster; nothing of ours is involved.
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
		if err := goleak.Find(etcdPeerVersionLeak); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var etcdPeerVersionLeak = goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1")
