// Package restartapi is the vocabulary of the management API's restart
// endpoint: what a restart answers, how it ended and why, and the
// interface that carries restarts out. Only reconfd restarts processes,
// so the vocabulary is internal; package admin serves the endpoint for a
// runtime that is also a Restarter, and reconfd's lifecycle implements
// one.
package restartapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/reconfhq/reconf"
)

// DefaultWait is how long a POST to the management API's restart path
// waits for the restart to finish when the request gives no ?wait=.
const DefaultWait = 60 * time.Second

// Outcome is how a restart ended: Restarted, Failed, Running while it
// runs, or the name of the reload outcome that ended it before it began
// (the check's refusal, or busy).
type Outcome string

// The restart outcomes beside the reload outcomes.
const (
	// Restarted: new processes serve the file's current content (200).
	Restarted Outcome = "restarted"
	// Failed: a new process did not start or become ready within its
	// bound, or (internal_error) the restart could not begin; the old
	// processes keep serving unchanged (503).
	Failed Outcome = "restart-failed"
	// Running: the restart has not finished yet (202).
	Running Outcome = "restart-running"
	// Refused: the file asks for a change a restart cannot make (for
	// example a new listening address); nothing changed (409).
	Refused Outcome = "restart-refused"
)

// HTTPStatus returns the management API status for the outcome: 200
// restarted, 503 restart-failed, 202 restart-running, and a reload
// outcome's own status for the others (409 busy, 422 invalid, ...).
func (o Outcome) HTTPStatus() int {
	switch o {
	case Restarted:
		return http.StatusOK
	case Failed:
		return http.StatusServiceUnavailable
	case Running:
		return http.StatusAccepted
	case Refused:
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
	ReasonRestarted  = "restarted"
	ReasonRunning    = "restart_in_progress"
	ReasonNotReady   = "restart_new_process_not_ready"
	ReasonNotStarted = "restart_new_process_not_started"
	// ReasonNewExited: the new process exited just after it took
	// over, and the old one, still draining, took its listeners back.
	ReasonNewExited      = "restart_new_process_exited"
	ReasonCanceled       = "restart_canceled"
	ReasonAddressChanged = "restart_address_changed"
	ReasonClusterChanged = "restart_cluster_changed"
)

// Result is the result of one restart; every field is safe to show.
type Result struct {
	ID      string  `json:"id"`
	Done    bool    `json:"done"`
	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason"`
	Message string  `json:"message"`
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

// Restarter carries out restarts for the management API: admin serves
// the restart endpoint when the admin.Runtime given to admin.New is also
// a Restarter. Its methods must be safe for concurrent use.
type Restarter interface {
	// Restart checks the source like a reload and, when the check allows
	// a restart (published, no-op or restart-required), begins one that
	// belongs to the Restarter, not to the request, and returns at once
	// with Done false. A refused check, or a restart or reload already in
	// progress (busy), is returned as a Done result. actor names who asked.
	Restart(ctx context.Context, actor string) (Result, error)
	// WaitRestart returns the restart with id once it is done, or as it
	// stands when ctx ends; ok is false for an id it does not know.
	WaitRestart(ctx context.Context, id string) (res Result, ok bool)
}

// ErrHandoverInProgress is returned by a Runtime's Reload or a
// Restarter's Restart when this process is handing its listeners to a
// successor, or has handed them: it will not serve what it would publish.
// The management API answers it 409 ReasonHandoverInProgress with
// Connection: close, so that the client's next connection reaches the
// process that serves.
var ErrHandoverInProgress = errors.New("admin: this process is handing over to a successor")

// ReasonHandoverInProgress (409): this process is handing its listeners
// to a successor (a restart) or has handed them; the answer carries
// Connection: close: send the request again on a new connection, which
// the process that serves accepts.
const ReasonHandoverInProgress = "handover_in_progress"
