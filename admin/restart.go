package admin

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/reconfhq/reconf"
)

// RestartPath starts a restart (POST); RestartPath + "/{id}" follows one
// (GET).
const RestartPath = "/admin/config/restart"

// DefaultRestartWait is how long POST RestartPath waits for the restart to
// finish when the request gives no ?wait=.
const DefaultRestartWait = 60 * time.Second

// RestartOutcome is how a restart ended: Restarted, RestartFailed,
// RestartRunning while it runs, or the name of the reload outcome that
// ended it before it began (the check's refusal, or busy).
type RestartOutcome string

// The restart outcomes beside the reload outcomes.
const (
	// Restarted: new processes serve the file's current content (200).
	Restarted RestartOutcome = "restarted"
	// RestartFailed: a new process did not start or become ready within
	// its bound, or (internal_error) the restart could not begin; the
	// old processes keep serving unchanged (503).
	RestartFailed RestartOutcome = "restart-failed"
	// RestartRunning: the restart has not finished yet (202).
	RestartRunning RestartOutcome = "restart-running"
	// RestartRefused: the file asks for a change a restart cannot make
	// (for example a new listening address); nothing changed (409).
	RestartRefused RestartOutcome = "restart-refused"
)

// HTTPStatus returns the management API status for the outcome: 200
// restarted, 503 restart-failed, 202 restart-running, and a reload
// outcome's own status for the others (409 busy, 422 invalid, ...).
func (o RestartOutcome) HTTPStatus() int {
	switch o {
	case Restarted:
		return http.StatusOK
	case RestartFailed:
		return http.StatusServiceUnavailable
	case RestartRunning:
		return http.StatusAccepted
	case RestartRefused:
		return http.StatusConflict
	}
	var r reconf.Outcome
	if r.UnmarshalText([]byte(o)) == nil {
		return r.HTTPStatus()
	}
	return http.StatusInternalServerError
}

// Reasons of restart results.
const (
	ReasonRestarted         = "restarted"
	ReasonRestartRunning    = "restart_in_progress"
	ReasonRestartNotReady   = "restart_new_process_not_ready"
	ReasonRestartNotStarted = "restart_new_process_not_started"
	// ReasonRestartNewExited: the new process exited just after it took
	// over, and the old one, still draining, took its listeners back.
	ReasonRestartNewExited = "restart_new_process_exited"
	ReasonRestartCanceled  = "restart_canceled"
	ReasonAddressChanged   = "restart_address_changed"
	ReasonClusterChanged   = "restart_cluster_changed"
)

// RestartResult is the result of one restart; every field is safe to show.
type RestartResult struct {
	ID      string         `json:"id"`
	Done    bool           `json:"done"`
	Outcome RestartOutcome `json:"outcome"`
	Reason  string         `json:"reason"`
	Message string         `json:"message"`
	// Check is the check's result (the file read and compared like a
	// reload); a refusal other than restart-required ends the restart
	// with its outcome.
	Check *reconf.Result `json:"check,omitempty"`
	// OldPIDs were replaced by NewPIDs (in a fleet, in worker order).
	OldPIDs []int `json:"old_pids"`
	NewPIDs []int `json:"new_pids"`
	// OldSupervisorPID and NewSupervisorPID are set when a fleet's
	// supervisor was replaced too (its executable changed on disk).
	OldSupervisorPID int `json:"old_supervisor_pid,omitempty"`
	NewSupervisorPID int `json:"new_supervisor_pid,omitempty"`
	// PreviousGeneration was active before; Generation is active now.
	PreviousGeneration uint64    `json:"previous_generation"`
	Generation         uint64    `json:"generation"`
	Started            time.Time `json:"started"`
	DurationMS         float64   `json:"duration_ms"`
}

// Restarter carries out restarts for the management API (WithRestarter).
// Its methods must be safe for concurrent use.
type Restarter interface {
	// Restart checks the source like a reload and, when the check allows
	// a restart (published, no-op or restart-required), begins one that
	// belongs to the Restarter, not to the request, and returns at once
	// with Done false. A refused check, or a restart or reload already in
	// progress (busy), is returned as a Done result. actor names who asked.
	Restart(ctx context.Context, actor string) (RestartResult, error)
	// WaitRestart returns the restart with id once it is done, or as it
	// stands when ctx ends; ok is false for an id it does not know.
	WaitRestart(ctx context.Context, id string) (res RestartResult, ok bool)
}

// WithRestarter serves POST RestartPath and GET RestartPath/{id} with r,
// behind the same checks as reload.
func WithRestarter(r Restarter) Option { return func(o *options) { o.restarter = r } }

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

// restartWait reads ?wait= (a Go duration, default DefaultRestartWait),
// capped below the write timeout so the answer can still be written.
func (s *Server) restartWait(r *http.Request) (time.Duration, error) {
	wait := DefaultRestartWait
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, errBadWait
		}
		wait = d
	}
	return min(wait, s.o.timeouts.Reload), nil
}

func (s *Server) writeRestart(w http.ResponseWriter, r *http.Request, res RestartResult) error {
	if !res.Done {
		res.Outcome, res.Reason = RestartRunning, ReasonRestartRunning
		w.Header().Set("Location", RestartPath+"/"+res.ID)
	}
	s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: restart answered",
		slog.String("id", res.ID), slog.String("outcome", string(res.Outcome)), slog.String("reason", res.Reason),
		slog.Int("status", res.Outcome.HTTPStatus()), slog.Uint64("generation", res.Generation))
	return writeJSON(w, res.Outcome.HTTPStatus(), res)
}
