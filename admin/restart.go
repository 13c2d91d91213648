package admin

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/restartapi"
)

// RestartPath starts a restart (POST); RestartPath + "/{id}" follows one
// (GET).
const RestartPath = "/admin/config/restart"

// restart answers POST /admin/config/restart[?wait=DURATION].
func (s *Server) restart(w http.ResponseWriter, r *http.Request) error {
	if err := readEmptyBody(w, r); err != nil {
		return err
	}
	wait, err := s.restartWait(r)
	if err != nil {
		return err
	}
	// Like a reload, the restart does not depend on the client staying;
	// ?wait= bounds the wait for its result only, not its check (which the
	// runtime's attempt timeout bounds) nor its start: a short wait gets
	// 202, never a canceled restart.
	begin := context.WithoutCancel(r.Context())
	// The process that answers may be gone once the restart ends: the
	// client's next request goes on a new connection, to the one that
	// serves.
	w.Header().Set("Connection", "close")
	res, err := s.o.restarter.Restart(begin, s.actor(r))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(begin, wait)
	defer cancel()
	if !res.Done {
		if got, ok := s.o.restarter.WaitRestart(ctx, res.ID); ok {
			res = got
		}
	}
	return s.writeRestart(w, r, res)
}

// restartStatus answers GET /admin/config/restart/{id}[?wait=DURATION].
func (s *Server) restartStatus(w http.ResponseWriter, r *http.Request) error {
	wait := time.Duration(0)
	if r.URL.Query().Has("wait") {
		var err error
		if wait, err = s.restartWait(r); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), wait)
	defer cancel()
	res, ok := s.o.restarter.WaitRestart(ctx, strings.TrimPrefix(r.URL.Path, RestartPath+"/"))
	if !ok {
		return errRestartUnknown
	}
	return s.writeRestart(w, r, res)
}

// restartWait reads ?wait= (a Go duration, default restartapi.DefaultWait),
// capped below the write timeout so the answer can still be written.
func (s *Server) restartWait(r *http.Request) (time.Duration, error) {
	wait := restartapi.DefaultWait
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, errBadWait
		}
		wait = d
	}
	return min(wait, s.o.timeouts.Reload), nil
}

func (s *Server) writeRestart(w http.ResponseWriter, r *http.Request, res restartapi.Result) error {
	if !res.Done {
		res.Outcome, res.Reason = restartapi.Running, restartapi.ReasonRunning
		w.Header().Set("Location", RestartPath+"/"+res.ID)
	}
	s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: restart answered",
		slog.String("id", res.ID), slog.String("outcome", string(res.Outcome)), slog.String("reason", res.Reason),
		slog.Int("status", res.Outcome.HTTPStatus()), slog.Uint64("generation", res.Generation))
	return writeJSON(w, res.Outcome.HTTPStatus(), res)
}
