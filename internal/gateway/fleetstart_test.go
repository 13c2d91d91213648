package gateway

import (
	"context"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fieldclass"
)

// A worker started in place of one that died, while the file holds an
// edit of a restart field not yet restarted, runs the fleet's restart
// fields: the pending file is restart-required here as on its peers, and
// the fleet's file publishes. Before, the worker took the file's values
// and refused the fleet's own file as restart_field_changed.
func TestFleetRestartFieldsWinAtStart(t *testing.T) {
	fleet := "server: {address: 127.0.0.1:8080}\n" + stubConfig(2, "0s")
	pending := "server: {address: 127.0.0.1:9999}\n" + stubConfig(2, "0s")
	var differed []string
	rf := RestartFields{Address: "127.0.0.1:8080", Workers: 1, ClusterPrefix: "/reconf/reconfd", AuthMode: "none"}
	tg := startGateway(t, pending, WithFleetRestartFields(rf, func(p []string) { differed = p }))

	if got := RestartFieldsOf(tg.Config()); !reflect.DeepEqual(got, rf) {
		t.Fatalf("first generation's restart fields %+v, want the fleet's %+v", got, rf)
	}
	if want := []string{"server.address"}; !slices.Equal(differed, want) {
		t.Errorf("reported as differing: %v, want %v", differed, want)
	}
	if res := tg.reload(pending); res.Outcome != reconf.RestartRequired {
		t.Errorf("the pending file: %s (%s), want restart-required", res.Outcome, res.Reason)
	}
	if res := tg.reload(strings.Replace(fleet, "tokens: 2", "tokens: 3", 1)); res.Outcome != reconf.Published {
		t.Errorf("the fleet's file with a live change: %s (%s), want published", res.Outcome, res.Reason)
	}
}

// A pending auth.mode change never reaches a replaced worker alone: a
// file that turns keys on (or off) is not valid with the fleet's mode, so
// the worker does not start until the fleet restarts or the file is
// reverted (the supervisor retries with backoff; its peers serve).
// Before, the replaced worker served with the file's mode: asking every
// client for a key its peers did not ask for, or, the other way, serving
// without keys in a fleet that requires them.
func TestFleetRestartFieldsAuthModeNotAlone(t *testing.T) {
	for _, tc := range []struct{ name, fleetMode, file string }{
		{"keys turned on", "none", "auth: {mode: api_keys, api_keys: [\"client-key-123\"]}\n"},
		{"keys turned off", "api_keys", "auth: {mode: none}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "reconfd.yaml")
			writeAtomic(t, path, tc.file+stubConfig(2, "0s"))
			rf := RestartFields{Address: "127.0.0.1:8080", Workers: 1, ClusterPrefix: "/reconf/reconfd", AuthMode: tc.fleetMode}
			g, err := New(context.Background(), path, WithLogger(slog.New(slog.DiscardHandler)), WithFleetRestartFields(rf, nil))
			if err == nil {
				g.Shutdown(context.Background())
				t.Fatalf("a worker started with auth.mode %q from the file while its fleet runs %q", g.Config().Auth.Mode, tc.fleetMode)
			}
		})
	}
}

// RestartFields covers every restart-class field of Config: a new one
// must be carried to a replaced worker too.
func TestRestartFieldsCoverEveryRestartField(t *testing.T) {
	var c Config
	RestartFields{Address: "a", Workers: 2, Cluster: []string{"c"}, ClusterPrefix: "p", AuthMode: "m"}.apply(&c)
	covered := RestartFields{}.differ(&c)
	for _, fc := range fieldclass.Of(reflect.TypeFor[Config]()) {
		if fc.Class == "restart" && !slices.Contains(covered, strings.TrimSuffix(fc.Path, "[*]")) {
			t.Errorf("%s is a restart field that RestartFields does not carry", fc.Path)
		}
	}
	if r, err := ParseRestartFields(RestartFieldsOf(&c).String()); err != nil || !reflect.DeepEqual(r, RestartFieldsOf(&c)) {
		t.Errorf("round trip: %+v %v", r, err)
	}
}

// A replaced worker of a fleet that has published since its start joins
// at a cluster version whose live part differs from its file: the first
// generation is then compiled a second time, from the cluster record, and
// must still take the fleet's restart fields. Before, the override ran
// once (on the local compile, discarded) and the worker started on the
// file's pending restart fields after all.
func TestFleetRestartFieldsWinWhenJoiningANewerVersion(t *testing.T) {
	etcd := startEtcd(t)
	opts := func(w string) Option {
		return WithCluster(ClusterOptions{Endpoints: etcd.Endpoints(), Prefix: "/test/" + t.Name(), Worker: w})
	}
	g1 := startGateway(t, baseConfig, opts("1"))
	if res := g1.reload(strings.Replace(baseConfig, "tokens: 4", "tokens: 6", 1)); res.Outcome != reconf.Published {
		t.Fatalf("reload: %s (%s): %s", res.Outcome, res.Reason, res.Message)
	}
	rf := RestartFieldsOf(g1.Config())
	pending := strings.Replace(baseConfig, "address: 127.0.0.1:0", "address: 127.0.0.1:9999", 1)
	var differed []string
	g2 := startGateway(t, pending, opts("2"), WithFleetRestartFields(rf, func(p []string) { differed = p }))
	if got := RestartFieldsOf(g2.Config()); !reflect.DeepEqual(got, rf) {
		t.Fatalf("replaced worker's restart fields %+v, want the fleet's %+v", got, rf)
	}
	if want := []string{"server.address"}; !slices.Equal(differed, want) {
		t.Errorf("reported as differing: %v, want %v", differed, want)
	}
}
