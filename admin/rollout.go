package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
)

// rolloutKey carries the strategy a reload names.
type rolloutKey struct{}

// WithRollout returns ctx naming the rollout strategy of the reload run
// with it (POST /admin/config/reload?rollout=NAME sets it): the runtime
// behind the management API stages the change with that strategy instead
// of its default.
func WithRollout(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, rolloutKey{}, name)
}

// reapplyKey marks a reload that re-applies rolled-back content.
type reapplyKey struct{}

// WithReapply returns ctx asking the reload run with it to accept the
// content a rollout rolled back (POST /admin/config/reload?reapply=1
// sets it): the deliberate way back that a plain reload refuses as
// rolled_back_content.
func WithReapply(ctx context.Context) context.Context {
	return context.WithValue(ctx, reapplyKey{}, true)
}

// Reapplying reports whether WithReapply set ctx.
func Reapplying(ctx context.Context) bool {
	v, _ := ctx.Value(reapplyKey{}).(bool)
	return v
}

// RolloutName returns the strategy that WithRollout set on ctx, and
// false when the reload names none.
func RolloutName(ctx context.Context) (string, bool) {
	n, ok := ctx.Value(rolloutKey{}).(string)
	return n, ok
}

// The rollout paths (WithRollouts).
const (
	// RolloutPath answers GET with the rollout in progress, else the last
	// one, and the generations a rollback may name.
	RolloutPath = "/admin/rollout"
	// RollbackPath reverts to a recorded generation (POST, ?to=N), or
	// without ?to aborts the rollout in progress, else reverts to the
	// generation published before the active one.
	RollbackPath = "/admin/config/rollback"
)

// rolloutActions are the controls under RolloutPath + "/": POST
// /admin/rollout/pause and so on.
var rolloutActions = []string{"pause", "resume", "promote", "abort"}

// RolloutControls are a runtime's rollout controls; *reconf.Runtime has
// them.
type RolloutControls interface {
	PauseRollout(ctx context.Context) (reconf.RolloutStatus, error)
	ResumeRollout(ctx context.Context) (reconf.RolloutStatus, error)
	PromoteRollout(ctx context.Context) (reconf.RolloutStatus, error)
	AbortRollout(ctx context.Context) (reconf.RolloutStatus, error)
	Revert(ctx context.Context, t reconf.Trigger, to uint64) (reconf.Result, error)
}

// WithRollouts serves the rollout controls: GET /admin/rollout, POST
// /admin/rollout/{pause,resume,promote,abort} and POST
// /admin/config/rollback[?to=N]. Each acts with the request's actor, as a
// reload does.
func WithRollouts(c RolloutControls) Option { return func(o *options) { o.rollouts = c } }

// RolloutResponse is GET /admin/rollout's answer and every control's: the
// rollout in progress (else the last one; null when there was none) and
// the generations a rollback may name.
type RolloutResponse struct {
	Rollout             *reconf.RolloutStatus `json:"rollout"`
	ActiveGeneration    uint64                `json:"active_generation"`
	RecordedGenerations []uint64              `json:"recorded_generations"`
}

// Request errors of the rollout controls.
var (
	errBadRollout       = errors.New("admin: bad rollout name")
	errBadReapply       = errors.New("admin: bad reapply flag")
	errBadGeneration    = errors.New("admin: bad generation")
	errNoRollout        = errors.New("admin: no rollout in progress")
	errRolloutInCluster = errors.New("admin: rollout controls in a cluster")
	errNothingToRevert  = errors.New("admin: nothing to revert to")
	// A control whose decision the fleet's channel did not take: nothing
	// changed, and the answer says so rather than show the status.
	errDecisionSuperseded = errors.New("admin: the rollout moved on first")
	errDecisionNotWritten = errors.New("admin: the rollout decision was not written")
)

func init() {
	answers = append(answers, []struct {
		err error
		apiError
	}{
		{errBadRollout, apiError{http.StatusBadRequest, ReasonBadRollout, "?rollout= must name a strategy: 1 to 64 letters, digits and . _ - characters"}},
		{errBadReapply, apiError{http.StatusBadRequest, ReasonBadReapply, "?reapply= must be 1"}},
		{errBadGeneration, apiError{http.StatusBadRequest, ReasonBadGeneration, "?to= must be a generation number (see recorded_generations in GET " + RolloutPath + ")"}},
		{errNoRollout, apiError{http.StatusConflict, ReasonNoRollout, "no rollout is in progress"}},
		{errRolloutInCluster, apiError{http.StatusConflict, ReasonRolloutInCluster, "this fleet does not run staged rollouts yet; publish with a plain reload"}},
		{errNothingToRevert, apiError{http.StatusConflict, ReasonNothingToRevert, "no earlier generation is recorded; name one with ?to= (see recorded_generations in GET " + RolloutPath + ")"}},
		{errDecisionSuperseded, apiError{http.StatusConflict, string(reasons.Superseded), "the rollout's state moved on first (another operator or the rollout itself decided); nothing was done: see GET " + RolloutPath}},
		{errDecisionNotWritten, apiError{http.StatusServiceUnavailable, reasons.ClusterUnavailable, "the cluster channel could not be written; nothing was done and the rollout runs on as before: try again once etcd answers"}},
	}...)
}

// Reasons of the rollout controls.
const (
	// ReasonBadRollout (400): ?rollout= is not a strategy name.
	ReasonBadRollout = "bad_rollout"
	// ReasonBadReapply (400): ?reapply= is not 1.
	ReasonBadReapply = "bad_reapply"
	// ReasonBadGeneration (400): ?to= is not a generation number.
	ReasonBadGeneration = "bad_generation"
	// ReasonNoRollout (409): a rollout control with no rollout in progress.
	ReasonNoRollout = "no_rollout"
	// ReasonRolloutInCluster (409): the runtime is a fleet's, which does
	// not stage.
	ReasonRolloutInCluster = "rollout_in_cluster"
	// ReasonNothingToRevert (409): a rollback without ?to= and no earlier
	// recorded generation.
	ReasonNothingToRevert = "nothing_to_revert"
)

// rolloutQuery puts a reload's ?rollout=NAME (WithRollout) and
// ?reapply=1 (WithReapply) on ctx.
func rolloutQuery(ctx context.Context, r *http.Request) (context.Context, error) {
	q := r.URL.Query()
	if q.Has("reapply") {
		if vs := q["reapply"]; len(vs) != 1 || vs[0] != "1" {
			return ctx, errBadReapply
		}
		ctx = WithReapply(ctx)
	}
	if !q.Has("rollout") {
		return ctx, nil
	}
	vs := q["rollout"]
	if len(vs) != 1 || !strategyName(vs[0]) {
		return ctx, errBadRollout
	}
	return WithRollout(ctx, vs[0]), nil
}

// strategyName reports whether s may name a strategy.
func strategyName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '.' || c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// rolloutRoutes registers the rollout paths.
func (s *Server) rolloutRoutes(mux *http.ServeMux) {
	if s.o.rollouts == nil {
		return
	}
	mux.Handle(RolloutPath, s.handleRead(s.rolloutStatus))
	for _, a := range rolloutActions {
		// The status page's panel posts these with its session.
		mux.Handle(RolloutPath+"/"+a, s.handleWith(func(w http.ResponseWriter, r *http.Request) error { return s.rolloutControl(w, r, a) },
			tokenPageAct, []string{http.MethodPost}))
	}
	mux.Handle(RollbackPath, s.handle(s.rollback, http.MethodPost))
}

func (s *Server) rolloutDoc() RolloutResponse {
	st := s.rt.Status()
	rec := st.RecordedGenerations
	if rec == nil {
		rec = []uint64{}
	}
	return RolloutResponse{Rollout: st.Rollout, ActiveGeneration: st.ActiveGeneration, RecordedGenerations: rec}
}

// rolloutStatus answers GET /admin/rollout.
func (s *Server) rolloutStatus(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, s.rolloutDoc())
}

// rolloutControl answers POST /admin/rollout/ACTION.
func (s *Server) rolloutControl(w http.ResponseWriter, r *http.Request, action string) error {
	if err := readEmptyBody(w, r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.o.timeouts.Reload)
	defer cancel()
	ctx = reconf.WithActor(ctx, s.actor(r))
	c := s.o.rollouts
	var err error
	switch action {
	case "pause":
		_, err = c.PauseRollout(ctx)
	case "resume":
		_, err = c.ResumeRollout(ctx)
	case "promote":
		_, err = c.PromoteRollout(ctx)
	case "abort":
		_, err = c.AbortRollout(ctx)
	}
	if err = controlError(ctx, err); err != nil {
		return err
	}
	s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: rollout control", slog.String("action", action))
	return writeJSON(w, http.StatusOK, s.rolloutDoc())
}

// controlError maps a rollout control's error to the answer's.
func controlError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, reconf.ErrNoRollout):
		return errNoRollout
	case errors.Is(err, reconf.ErrRolloutInCluster):
		return errRolloutInCluster
	case ctx.Err() != nil:
		return errPending
	}
	if e := (*reconf.Error)(nil); errors.As(err, &e) {
		switch e.Reason {
		case reasons.Superseded:
			return errDecisionSuperseded
		case reasons.ClusterUnavailable:
			return errDecisionNotWritten
		}
	}
	return err
}

// rollback answers POST /admin/config/rollback[?to=N]: with ?to= a
// Revert to that recorded generation; without it, an abort of the
// rollout in progress, else a Revert to the generation recorded before
// the active one. A Revert answers like a reload (its result).
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) error {
	if err := readEmptyBody(w, r); err != nil {
		return err
	}
	q := r.URL.Query()
	var to uint64
	if q.Has("to") {
		vs := q["to"]
		n, err := strconv.ParseUint(vs[0], 10, 64)
		if len(vs) != 1 || err != nil || n == 0 {
			return errBadGeneration
		}
		to = n
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.o.timeouts.Reload)
	defer cancel()
	ctx = reconf.WithActor(ctx, s.actor(r))
	st := s.rt.Status()
	if to == 0 {
		if st.Rollout != nil && !st.Rollout.Done() {
			if _, err := s.o.rollouts.AbortRollout(ctx); !errors.Is(err, reconf.ErrNoRollout) {
				if err = controlError(ctx, err); err != nil {
					return err
				}
				return writeJSON(w, http.StatusOK, s.rolloutDoc())
			}
		}
		for _, id := range st.RecordedGenerations {
			if id < st.ActiveGeneration {
				to = id // the latest before the active one: the list is oldest first
			}
		}
		if to == 0 {
			return errNothingToRevert
		}
	}
	res, err := s.o.rollouts.Revert(ctx, reconf.TriggerAPI, to)
	if err = attemptError(ctx, err); err != nil {
		return err
	}
	s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: rollback answered",
		slog.String("outcome", res.Outcome.String()), slog.String("reason", string(res.Reason)),
		slog.Uint64("to", to), slog.Uint64("generation", res.Generation))
	return writeJSON(w, res.Outcome.HTTPStatus(), res)
}
