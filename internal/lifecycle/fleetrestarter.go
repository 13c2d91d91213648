package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// FleetRestarter is a worker's restartapi.Restarter: it checks the file like a
// reload, then asks its supervisor to restart the fleet.
type FleetRestarter struct {
	g        *gateway.Gateway
	rt       *reconf.Runtime[gateway.Config]
	client   *http.Client
	mark     string   // WorkerEnv.RestartMark, or empty
	recorded sync.Map // id -> actor; a restart this worker asked for, to record in the fleet's history
}

// NewFleetRestarter asks the supervisor at the control socket path, and
// looks for its restart mark at mark (WorkerEnv.RestartMark).
func NewFleetRestarter(g *gateway.Gateway, path, mark string) *FleetRestarter {
	return &FleetRestarter{g: g, rt: g.Runtime(), mark: mark, client: controlClient(path)}
}

// controlClient is an HTTP client of the control socket at path.
func controlClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

// Restart checks, then hands the restart to the supervisor.
func (f *FleetRestarter) Restart(ctx context.Context, actor string) (restartapi.Result, error) {
	prev := f.rt.Current().ID()
	if f.Running() {
		return restartapi.Result{Done: true, Outcome: restartapi.Outcome(reconf.Busy.String()), Reason: restartapi.ReasonRunning,
			Message: "a restart is in progress; try again when it ends", PreviousGeneration: prev, Generation: prev, Started: time.Now()}, nil
	}
	if res, busy := rolloutBusy(f.rt); busy {
		return res, nil
	}
	chk, err := f.rt.Check(ctx)
	if err != nil {
		return restartapi.Result{}, err
	}
	if !checkAllows(chk.Outcome) {
		res := refusedByCheck(chk)
		_ = f.g.RecordHistory(ctx, historyOf(res, actor))
		return res, nil
	}
	body, _ := json.Marshal(restartRequest{PreviousGeneration: prev, Actor: actor})
	var res restartapi.Result
	if err := f.call(ctx, http.MethodPost, "/restart", body, &res); err != nil {
		return restartapi.Result{}, err
	}
	if res.Reason == restartapi.ReasonHandoverInProgress {
		// This worker's supervisor handed the fleet over: the client
		// sends it again on a new connection, to the new fleet.
		return restartapi.Result{}, restartapi.ErrHandoverInProgress
	}
	if !res.Done {
		f.recorded.Store(res.ID, actor)
	}
	return res, nil
}

// WaitRestart asks the supervisor, waiting as long as ctx allows.
func (f *FleetRestarter) WaitRestart(ctx context.Context, id string) (restartapi.Result, bool) {
	wait := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl) - 100*time.Millisecond
	}
	var res restartapi.Result
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(wait, 0)+5*time.Second)
	defer cancel()
	if err := f.call(cctx, http.MethodGet, "/restart/"+url.PathEscape(id)+"?wait="+max(wait, 0).String(), nil, &res); err != nil {
		return restartapi.Result{}, false
	}
	if actor, ok := f.recorded.Load(id); ok && res.Done {
		// The worker that asked records the restart in the fleet's
		// history, once, as soon as it sees the result.
		f.recorded.Delete(id)
		_ = f.g.RecordHistory(cctx, historyOf(res, actor.(string)))
	}
	return res, true
}

// Running reports whether the supervisor runs a restart; an unreachable
// supervisor counts as not. Every reload asks (Guard): with the
// supervisor's mark, no mark is the answer, a file look-up instead of a
// round trip to the supervisor; a mark is confirmed over the socket, so
// one left behind costs only that question.
func (f *FleetRestarter) Running() bool {
	if f.mark != "" {
		if _, err := os.Lstat(f.mark); errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	st, ok := f.State()
	return ok && st.InProgress
}

// State asks the supervisor for the restart part of the status; false
// when it does not answer.
func (f *FleetRestarter) State() (RestartState, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st RestartState
	return st, f.call(ctx, http.MethodGet, "/state", nil, &st) == nil
}

func (f *FleetRestarter) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://supervisor"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("the supervisor cannot be reached: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("the supervisor answered " + resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxControlBody)).Decode(out)
}
