package reconf

import (
	"context"
	"strings"
	"testing"
)

// TestExpectedDigest: a reload that expects other content than the source
// holds is precondition-failed before anything else, reveals no digest,
// and publishes once the content is there. Each mismatch is an attempt
// of its own, with the actor that a history folds them by.
func TestExpectedDigest(t *testing.T) {
	data := []byte("limit: 1\n")
	src := SourceFunc("test", func(context.Context, ReadRequest) (Snapshot, error) { return Snapshot{Data: data}, nil })
	h := &attemptLog{}
	rt, err := New[struct {
		Limit int `yaml:"limit" reconf:"live"`
	}](context.Background(), src, WithObserver(h))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	next := []byte("limit: 2\n")
	ctx, err := WithExpectedDigest(WithActor(context.Background(), "pipeline"), ContentDigest(next))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		res, err := rt.Reload(ctx, TriggerAPI)
		if err != nil || res.Outcome != PreconditionFailed || res.Reason != ReasonSourceDigestMismatch || res.HTTPStatus() != 412 {
			t.Fatalf("reload of old content: %v %s %s", err, res.Outcome, res.Reason)
		}
		if strings.Contains(res.Message, ContentDigest(data)[7:15]) || res.Generation != 1 {
			t.Fatalf("the answer shows the actual digest or moved: %+v", res)
		}
	}
	data = next
	res, _ := rt.Reload(ctx, TriggerAPI)
	if res.Outcome != Published || rt.Current().Config().Limit != 2 {
		t.Fatalf("reload of the expected content: %s %s", res.Outcome, res.Reason)
	}
	rs := h.results()
	if len(rs) != 5 || rs[0].Outcome != Published || rs[4].Trigger != TriggerStartup {
		t.Fatalf("attempts: %+v", rs)
	}
	for _, r := range rs[1:4] {
		if r.Outcome != PreconditionFailed || r.Actor != "pipeline" || r.Trigger != TriggerAPI {
			t.Fatalf("a mismatch's attempt: %+v", r)
		}
	}
	if _, err := WithExpectedDigest(context.Background(), "sha256:abc"); err == nil {
		t.Fatal("a short digest was accepted")
	}
	// Without an expectation nothing changes: the file holds limit 2.
	if res, _ := rt.Reload(context.Background(), TriggerSDK); res.Outcome != NoOp {
		t.Fatalf("a plain reload: %s", res.Outcome)
	}
}
