package reconf

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/restartopt"
)

// restartDoc is a cluster worker's file: a restart-class address and a
// live limit.
func restartDoc(address, limit string) string {
	return "server:\n  address: " + address + "\nlimits:\n  stub: " + limit + "\nbackend:\n  name: b\n"
}

// newPinnedWorker is a worker started in place of one that died: its file
// holds an address edit its peers have not restarted into, and it runs on
// the peers' address.
func newPinnedWorker(t *testing.T, ch fleet.Channel, data, address string) (*Runtime[clusterConfig], *memSource) {
	t.Helper()
	return newClusterWorker(t, ch, data, nil, restartOption(restartopt.Restart{Values: func(c *clusterConfig) { c.Server.Address = address }}))
}

// A worker started on restart values other than its file's keeps them
// through every cluster version it applies, joins included, and judges a
// reload of its file as written, like its peers. Before, each apply was
// compiled over the file's restart fields and refused as
// restart_field_changed, so the worker never followed the fleet again.
func TestRestartValuesHoldAcrossApplies(t *testing.T) {
	ctx := context.Background()
	ch := &faultChannel{}
	peer, peerSrc := newClusterWorker(t, ch, restartDoc("fleet", "4"), nil)

	// Joining with the same live part keeps the startup compile; with
	// another one (limit 2) the join compiles the cluster's record over the
	// file. Both keep the fleet's address.
	for _, limit := range []string{"4", "2"} {
		w, _ := newPinnedWorker(t, ch, restartDoc("pending", limit), "fleet")
		if got := w.Current().Config(); got.Server.Address != "fleet" || got.Limits["stub"] != 4 {
			t.Fatalf("file limit %s: joined with address %q limits %v, want fleet's address and the cluster's limit 4", limit, got.Server.Address, got.Limits)
		}
	}
	w, src := newPinnedWorker(t, ch, restartDoc("pending", "4"), "fleet")

	peerSrc.set(restartDoc("fleet", "8"))
	mustReloadC(t, peer, Published)
	v, rec := ch.current()
	res, err := w.applyVersion(ctx, v, rec)
	if err != nil || res.Outcome != Published || res.Generation != v {
		t.Fatalf("apply of version %d = %s (%s: %s) %v, want published", v, res.Outcome, res.Reason, res.Message, err)
	}
	if got := w.Current().Config(); got.Server.Address != "fleet" || got.Limits["stub"] != 8 {
		t.Fatalf("after the apply: address %q limits %v", got.Server.Address, got.Limits)
	}

	// The file's pending edit is refused here as on the peer.
	src.set(restartDoc("pending", "9"))
	if res := mustReloadC(t, w, RestartRequired); strings.Join(res.RestartRequiredFields, ",") != "server.address" {
		t.Fatalf("restart-required fields %v, want server.address", res.RestartRequiredFields)
	}
	// Reverted, the file reloads and publishes; the peer applies it.
	src.set(restartDoc("fleet", "9"))
	res = mustReloadC(t, w, Published)
	v, rec = ch.current()
	if res.Generation != v {
		t.Fatalf("published as %d, the channel holds %d", res.Generation, v)
	}
	if res, err := peer.applyVersion(ctx, v, rec); err != nil || res.Outcome != Published || peer.Current().Config().Limits["stub"] != 9 {
		t.Fatalf("peer apply = %+v, %v", res, err)
	}
}

// A mutation found in a generation compiled on the process's restart
// values names the mutated path only, not the restart fields the file
// differs in.
func TestRestartValuesMutationPaths(t *testing.T) {
	ch := &faultChannel{}
	newClusterWorker(t, ch, restartDoc("fleet", "4"), nil)
	src := newMem(restartDoc("pending", "4"))
	var got []Mutation
	rt, err := New[clusterConfig](context.Background(), src, withChannel(ch), WithLogger(discardLogger()), WithEnv(noEnv),
		WithMutationObserver(func(m Mutation) { got = append(got, m) }),
		restartOption(restartopt.Restart{Values: func(c *clusterConfig) { c.Server.Address = "fleet" }}))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	rt.Current().Config().Limits["stub"] = 5 // the bug the detector exists for
	mustReloadC(t, rt, RestartRequired)
	if len(got) != 1 || strings.Join(got[0].Paths, ",") != "limits[stub]" {
		t.Fatalf("mutations %+v, want one naming limits[stub] only", got)
	}
}

// Restart values may set restart-class fields only: a live field it
// changes fails New with the field's path, never silently.
func TestRestartValuesRefusesLiveFields(t *testing.T) {
	_, err := New[clusterConfig](context.Background(), newMem(restartDoc("a", "4")), WithLogger(discardLogger()), WithEnv(noEnv),
		restartOption(restartopt.Restart{Values: func(c *clusterConfig) { c.Limits = map[string]int{"stub": 1} }}))
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonInternal || !strings.Contains(e.Message, "limits[stub]") {
		t.Fatalf("New = %v, want internal_error naming limits[stub]", err)
	}
	_, err = New[clusterConfig](context.Background(), newMem(restartDoc("a", "4")),
		restartOption(restartopt.Restart{Values: func(*clusterConfig) {}}), restartOption(restartopt.Restart{Values: func(*clusterConfig) {}}))
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("restart values twice: %v", err)
	}
	_, err = New[testConfig](context.Background(), newMem(restartDoc("a", "4")), restartOption(restartopt.Restart{Values: func(*clusterConfig) {}}))
	if err == nil || !strings.Contains(err.Error(), "restart values were made for another configuration type") {
		t.Fatalf("restart values of another type: %v", err)
	}
}
