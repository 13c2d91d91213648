package admin_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// TestHistoryEndpoint reloads through the API and reads the history back:
// newest first, the actor, changed paths and no value; limit bounds it;
// a bad limit and an unreadable history have their own reasons.
func TestHistoryEndpoint(t *testing.T) {
	e := start(t, setup{token: testToken, history: true})
	e.src.set(yamlOf("127.0.0.1:8080", 5, canaryNext))
	if a := e.do("POST", admin.ReloadPath, ""); a.status != http.StatusOK {
		t.Fatalf("reload: %d %s", a.status, a.body)
	}
	var doc admin.HistoryResponse
	decodeInto(t, e.do("GET", admin.HistoryPath, ""), &doc)
	if len(doc.Entries) != 2 {
		t.Fatalf("%d entries, want the start-up and the reload: %+v", len(doc.Entries), doc.Entries)
	}
	got := doc.Entries[0]
	if got.Trigger != reconf.TriggerAPI || got.Actor != "api token" || got.Generation != 2 ||
		!slices.Equal(got.ChangedFields, []string{"limit", "literal"}) {
		t.Errorf("newest entry = %+v", got)
	}
	decodeInto(t, e.do("GET", admin.HistoryPath+"?limit=1", ""), &doc)
	if len(doc.Entries) != 1 {
		t.Errorf("limit=1 answered %d entries", len(doc.Entries))
	}
	if a := e.do("GET", admin.HistoryPath+"?limit=-3", ""); a.status != http.StatusBadRequest || errorReason(t, a) != admin.ReasonBadLimit {
		t.Errorf("bad limit: %d %s", a.status, a.body)
	}
	if a := e.do("POST", admin.HistoryPath, ""); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST history: %d", a.status)
	}
	e.token = ""
	if a := e.do("GET", admin.HistoryPath, ""); a.status != http.StatusUnauthorized {
		t.Errorf("history without the token: %d", a.status)
	}

	broken := start(t, setup{admin: []admin.Option{admin.WithHistory(func(context.Context, int) ([]reconf.HistoryEntry, error) {
		return nil, errors.New("etcd is away")
	})}})
	if a := broken.do("GET", admin.HistoryPath, ""); a.status != http.StatusServiceUnavailable || errorReason(t, a) != admin.ReasonHistoryUnavailable {
		t.Errorf("unreadable history: %d %s", a.status, a.body)
	}
	if !strings.Contains(broken.logs.String(), "etcd is away") {
		t.Errorf("the history's failure is not logged")
	}
}
