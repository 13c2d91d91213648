//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/etcdproc"
)

// rolloutToken is the management token of the rollout tests' servers.
const rolloutToken = "rollout-e2e-management-token-0123"

// rolloutFleet is serve --workers 4 on an etcd process of its own, in
// front of the four rollout upstreams, with a client of that etcd to
// read the rollout's keys directly.
type rolloutFleet struct {
	s      *server
	etcd   *etcdproc.Process
	cli    *clientv3.Client
	menv   []string // the environment of a CLI run against s
	prefix string
	// cfg is the configuration with the alias on backend target, and the
	// fleet's strategies.
	cfg func(target string) string
}

// startRolloutFleet starts a rolloutFleet under prefix whose
// configuration carries strategies (rolloutConfig's list goes on), with
// extra serve arguments, and waits for its four workers.
func startRolloutFleet(t *testing.T, prefix, strategies string, args ...string) *rolloutFleet {
	t.Helper()
	requireBinary(t)
	etcd := startEtcdProcess(t)
	ep := tcpForward(t, etcd.Endpoint())
	ups := rolloutUpstreams(t)
	cfg := func(target string) string {
		return fmt.Sprintf(rolloutConfig, ups[0], ups[1], ups[2], ups[3], target, 4) + strategies
	}
	s := startServer(t, cfg("good"), append([]string{"--management-address", "127.0.0.1:0", "--cluster", ep, "--cluster-prefix", prefix}, args...),
		"RECONF_MANAGEMENT_TOKEN="+rolloutToken)
	waitFleet(t, s, rolloutToken, 1, 4)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &rolloutFleet{s: s, etcd: etcd, cli: cli, prefix: prefix, cfg: cfg,
		menv: []string{"RECONF_MANAGEMENT_ADDRESS=" + s.mgmt, "RECONF_MANAGEMENT_TOKEN=" + rolloutToken}}
}

// stage writes content into the fleet's file and stages it with
// strategy through the CLI; it returns the candidate's number.
func (f *rolloutFleet) stage(t *testing.T, content, strategy string) uint64 {
	t.Helper()
	writeAtomic(t, f.s.config, content)
	code, out, errOut := reconfd(t, f.menv, "reload", "--rollout", strategy, "--output", "json")
	var res reconf.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Reason != reconf.ReasonRolloutStarted {
		t.Fatalf("reload --rollout %s: exit %d: %s %s", strategy, code, out, errOut)
	}
	return res.Generation
}
