package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/reconfhq/reconf/internal/restartapi"
)

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
	// stopMark is a file created when the supervisor stops the fleet
	// (WorkerEnv.FleetStopping).
	stopMark string
	// roll carries out a restart whose check passed; it finishes run.
	roll func(track *restartTracker, run *restartRun)
	// handingOver, when set, reports whether the supervisor is handing
	// the fleet to a new supervisor or has handed it: a restart then
	// never begins, whichever old worker asked (one owner).
	handingOver func() bool
}

// startControl listens on a new private socket and serves until close.
func startControl(roll func(*restartTracker, *restartRun)) (*controlServer, error) {
	dir, err := os.MkdirTemp("", "reconfd-control-")
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	c := &controlServer{dir: dir, path: filepath.Join(dir, "control.sock"), done: make(chan struct{}), roll: roll}
	c.track.mark = filepath.Join(dir, "restart-running")
	c.stopMark = filepath.Join(dir, "fleet-stopping")
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
	if c.handingOver != nil && c.handingOver() {
		writeControl(w, restartapi.Result{Done: true, Reason: restartapi.ReasonHandoverInProgress,
			Message: "this supervisor has handed the fleet to a new one", PreviousGeneration: req.PreviousGeneration,
			Generation: req.PreviousGeneration, Started: time.Now()})
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
