package reconf

import (
	"context"
	"testing"

	"github.com/reconfhq/reconf/internal/restartopt"
)

// A restart's first new worker whose host cannot run the cluster's
// version (here a reference it cannot resolve; in reconfd, a live part
// not valid with its new auth.mode) starts on its file, and its first
// reload publishes the file over that version though it is unchanged.
// Before, New refused to start, and so did every restart. A version that
// runs here is joined as without the option.
func TestStartupPublishOverAVersionThatCannotRunHere(t *testing.T) {
	ch := &faultChannel{}
	newClusterWorker(t, ch, restartDoc("a", "1")+"  api_key: ${env:K}\n", map[string]string{"K": "key"})
	none := WithEnv(func(string) (string, bool) { return "", false })
	if rt, err := New[clusterConfig](context.Background(), newMem(restartDoc("b", "2")), withChannel(ch), WithLogger(discardLogger()), none); err == nil {
		_ = rt.Close(context.Background())
		t.Fatal("without the option, a worker started on a version it cannot run")
	}
	rt, _ := newClusterWorker(t, ch, restartDoc("b", "2"), nil, restartOption(restartopt.Restart{StartupPublish: true}))
	if g := rt.Current(); g.ID() != 1 || g.Config().Limits["stub"] != 2 {
		t.Fatalf("started at %d with limit %d; want its file's 2, numbered 1 until it publishes", g.ID(), g.Config().Limits["stub"])
	}
	res := mustReloadC(t, rt, Published)
	v, rec := ch.current()
	if g := rt.Current(); v != 2 || g.ID() != 2 || res.Generation != 2 || g.Config().Limits["stub"] != 2 || Trigger(rec.Trigger) != TriggerSDK {
		t.Fatalf("after the reload: cluster at %d (trigger %q), worker at %d with limit %d; want both at 2, the worker's file",
			v, rec.Trigger, g.ID(), g.Config().Limits["stub"])
	}
	// Published once: the next unchanged reload is a no-op.
	mustReloadC(t, rt, NoOp)

	rt3, _ := newClusterWorker(t, ch, restartDoc("b", "3"), nil, restartOption(restartopt.Restart{StartupPublish: true}))
	if g := rt3.Current(); g.ID() != 2 || g.Config().Limits["stub"] != 2 {
		t.Fatalf("a worker that can run the cluster's version: at %d with limit %d; want it joined at 2", g.ID(), g.Config().Limits["stub"])
	}
}
