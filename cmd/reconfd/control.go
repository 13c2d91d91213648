package main

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
	"path/filepath"
	"sync"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/gateway"
)

// envControl gives a worker the path of its supervisor's control socket,
// in a directory only the fleet's user can enter.
const envControl = "RECONF_SUPERVISOR_CONTROL"

// envRestartPublish asks the first new worker of a restart to publish the
// file's live part once it has joined, so the fleet serves the file's
// current content before the old workers drain.
const envRestartPublish = "RECONF_RESTART_PUBLISH"

// envRestartMark gives a worker the path of the file that exists while
// its supervisor runs a restart (see restartTracker.mark). A worker
// without it (its supervisor predates the mark) asks over the socket.
const envRestartMark = "RECONF_SUPERVISOR_RESTART_MARK"

// maxControlBody bounds a control answer.
const maxControlBody = 1 << 20

// controlServer is the supervisor's side of the restart protocol: workers
// ask it to restart the fleet (the supervisor owns the roll, not the
// worker that took the request), follow a restart, and ask whether one
// runs. It serves HTTP on a unix socket in a private directory.
type controlServer struct {
	dir  string
	path string
	srv  *http.Server
	done chan struct{}

	track restartTracker
	// roll carries out a restart whose check passed; it finishes run.
	roll func(track *restartTracker, run *restartRun)
}

// startControl listens on a new private socket and serves until close.
func startControl(roll func(*restartTracker, *restartRun)) (*controlServer, error) {
	dir, err := os.MkdirTemp("", "reconfd-control-")
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	c := &controlServer{dir: dir, path: filepath.Join(dir, "control.sock"), done: make(chan struct{}), roll: roll}
	c.track.mark = filepath.Join(dir, "restart-running")
	ln, err := net.Listen("unix", c.path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /restart", c.restart)
	mux.HandleFunc("GET /restart/{id}", c.follow)
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) { writeControl(w, c.track.state()) })
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(ln)
	}()
	return c, nil
}

// restartRequest is a worker's request: its check passed.
type restartRequest struct {
	PreviousGeneration uint64 `json:"previous_generation"`
	Actor              string `json:"actor"`
}

func (c *controlServer) restart(w http.ResponseWriter, r *http.Request) {
	var req restartRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	run, res, ok := c.track.begin(req.PreviousGeneration)
	if ok {
		go c.roll(&c.track, run)
	}
	writeControl(w, res)
}

func (c *controlServer) follow(w http.ResponseWriter, r *http.Request) {
	wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	res, ok := c.track.wait(ctx, r.PathValue("id"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	writeControl(w, res)
}

func writeControl(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// close stops serving and removes the socket's directory.
func (c *controlServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.srv.Shutdown(ctx)
	<-c.done
	os.RemoveAll(c.dir)
}

// fleetRestarter is a worker's admin.Restarter: it checks the file like a
// reload, then asks its supervisor to restart the fleet.
type fleetRestarter struct {
	g        *gateway.Gateway
	rt       *reconf.Runtime[gateway.Config]
	client   *http.Client
	mark     string   // envRestartMark's path, or empty
	recorded sync.Map // id -> actor; a restart this worker asked for, to record in the fleet's history
}

func newFleetRestarter(g *gateway.Gateway, path, mark string) *fleetRestarter {
	return &fleetRestarter{g: g, rt: g.Runtime(), mark: mark, client: controlClient(path)}
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
func (f *fleetRestarter) Restart(ctx context.Context, actor string) (admin.RestartResult, error) {
	prev := f.rt.Current().ID()
	if f.running() {
		return admin.RestartResult{Done: true, Outcome: admin.RestartOutcome(reconf.Busy.String()), Reason: admin.ReasonRestartRunning,
			Message: "a restart is in progress; try again when it ends", PreviousGeneration: prev, Generation: prev, Started: time.Now()}, nil
	}
	chk, err := f.rt.Check(ctx)
	if err != nil {
		return admin.RestartResult{}, err
	}
	if !checkAllows(chk.Outcome) {
		res := refusedByCheck(chk)
		_ = f.g.RecordHistory(ctx, historyOf(res, actor))
		return res, nil
	}
	body, _ := json.Marshal(restartRequest{PreviousGeneration: prev, Actor: actor})
	var res admin.RestartResult
	if err := f.call(ctx, http.MethodPost, "/restart", body, &res); err != nil {
		return admin.RestartResult{}, err
	}
	if !res.Done {
		f.recorded.Store(res.ID, actor)
	}
	return res, nil
}

// WaitRestart asks the supervisor, waiting as long as ctx allows.
func (f *fleetRestarter) WaitRestart(ctx context.Context, id string) (admin.RestartResult, bool) {
	wait := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl) - 100*time.Millisecond
	}
	var res admin.RestartResult
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(wait, 0)+5*time.Second)
	defer cancel()
	if err := f.call(cctx, http.MethodGet, "/restart/"+url.PathEscape(id)+"?wait="+max(wait, 0).String(), nil, &res); err != nil {
		return admin.RestartResult{}, false
	}
	if actor, ok := f.recorded.Load(id); ok && res.Done {
		// The worker that asked records the restart in the fleet's
		// history, once, as soon as it sees the result.
		f.recorded.Delete(id)
		_ = f.g.RecordHistory(cctx, historyOf(res, actor.(string)))
	}
	return res, true
}

// running reports whether the supervisor runs a restart; an unreachable
// supervisor counts as not. Every reload asks (restartGuard): with the
// supervisor's mark, no mark is the answer, a file look-up instead of a
// round trip to the supervisor; a mark is confirmed over the socket, so
// one left behind costs only that question.
func (f *fleetRestarter) running() bool {
	if f.mark != "" {
		if _, err := os.Lstat(f.mark); errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	st, ok := f.state()
	return ok && st.InProgress
}

func (f *fleetRestarter) state() (restartState, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st restartState
	return st, f.call(ctx, http.MethodGet, "/state", nil, &st) == nil
}

func (f *fleetRestarter) call(ctx context.Context, method, path string, body []byte, out any) error {
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
