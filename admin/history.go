package admin

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/history"
)

// HistoryPath serves the attempt history (with WithHistory).
const HistoryPath = "/admin/config/history"

// Default and largest number of entries a history request answers.
const (
	DefaultHistoryEntries = 50
	MaxHistoryEntries     = history.DefaultLimit
)

// HistoryFunc returns the newest n attempts, newest first. A fleet's reads
// the fleet's history from its channel (propagate.History.Entries); a
// single process's reads the entries it keeps as an observer of its
// runtime. It must be safe for concurrent use and honour ctx.
type HistoryFunc func(ctx context.Context, n int) ([]reconf.HistoryEntry, error)

// WithHistory serves GET /admin/config/history from fn, and shows the
// recent entries on the status page.
func WithHistory(fn HistoryFunc) Option { return func(o *options) { o.history = fn } }

// HistoryResponse is the JSON answer to GET /admin/config/history:
// entries newest first. Like every answer it holds paths, never values.
type HistoryResponse struct {
	Entries []reconf.HistoryEntry `json:"entries"`
}

// historyLimit reads ?limit=N: DefaultHistoryEntries when absent, at most
// MaxHistoryEntries.
func historyLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultHistoryEntries, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errBadLimit
	}
	return min(n, MaxHistoryEntries), nil
}

// historyAnswer answers GET /admin/config/history[?limit=N].
func (s *Server) historyAnswer(w http.ResponseWriter, r *http.Request) error {
	n, err := historyLimit(r)
	if err != nil {
		return err
	}
	es, err := s.o.history(r.Context(), n)
	if err != nil {
		s.o.logger.LogAttrs(r.Context(), slog.LevelWarn, "admin: the history could not be read", slog.Any("error", err))
		return errHistoryUnavailable
	}
	if es == nil {
		es = []reconf.HistoryEntry{}
	}
	return writeJSON(w, http.StatusOK, HistoryResponse{Entries: es})
}

// actor names who sent a management request, for the history: the
// verified client certificate's subject, else the bearer token, else
// nobody (a loopback listener without a token). It never holds a
// credential.
func (s *Server) actor(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return "api cert " + r.TLS.VerifiedChains[0][0].Subject.String()
	}
	if name, ok := s.bearer(r); ok && name != "" {
		return "api token " + name
	}
	if r.Header.Get("Authorization") != "" {
		return "api token"
	}
	if r.Header.Get(SessionHeader) != "" && s.validSession(r, time.Now()) {
		return "status page session"
	}
	return "api"
}
