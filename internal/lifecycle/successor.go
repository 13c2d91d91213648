package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/restartapi"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// supervisorHandover is what a supervisor hands to its successor besides
// the listening sockets: the embedded etcd's directories (the successor's
// member listens on the same socket, so every client, the old workers'
// included, reconnects to it, and starts from the same data: the cluster
// version, the history), the fleet's ID, and whether the management token
// was generated (the successor keeps it, and writes it for the CLI).
type supervisorHandover struct {
	EtcdData   string `json:"etcd_data,omitempty"`
	EtcdSocket string `json:"etcd_socket,omitempty"`
	// OwnsData: the data directory is one serve created under --data-dir,
	// which its owner removes at exit.
	OwnsData       bool   `json:"owns_data,omitempty"`
	Fleet          string `json:"fleet"`
	TokenGenerated bool   `json:"token_generated,omitempty"`
	// ReleaseFD is the successor's end of a socket pair on which it asks
	// for the member when it is about to start its own (everything else
	// is ready by then, so the channel is down for a member's start
	// only), and reads when the predecessor's member stopped.
	ReleaseFD int `json:"release_fd,omitempty"`
	// Restarts are the predecessor's restart counts (RestartState.Counts);
	// RestartID and RestartStarted name the restart that starts the
	// successor.
	Restarts       map[restartapi.Outcome]uint64 `json:"restarts,omitempty"`
	RestartID      string                        `json:"restart_id,omitempty"`
	RestartStarted time.Time                     `json:"restart_started"`
	// PID and Generation are the predecessor's pid and the generation
	// its fleet served when the restart began, for the restart's result:
	// the successor's parent is someone else once the predecessor is
	// killed during the hand-over.
	PID        int    `json:"pid"`
	Generation uint64 `json:"generation"`
}

// maxReleaseWait bounds how long a successor waits for its predecessor
// to release the embedded etcd.
const maxReleaseWait = 30 * time.Second

// awaitMember asks the predecessor to stop its member and waits until it
// did; it returns when the member stopped.
func (h *supervisorHandover) awaitMember() (time.Time, error) {
	f := os.NewFile(uintptr(h.ReleaseFD), "etcd-release")
	if f == nil {
		return time.Time{}, fmt.Errorf("%s: descriptor %d", envSupervisorHandover, h.ReleaseFD)
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return time.Time{}, fmt.Errorf("the previous supervisor's release socket: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(maxReleaseWait))
	if _, err := io.WriteString(c, "release\n"); err != nil {
		return time.Time{}, fmt.Errorf("asking the previous supervisor for the embedded etcd: %w", err)
	}
	line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
	word, at, _ := strings.Cut(strings.TrimSpace(line), " ")
	ns, perr := strconv.ParseInt(at, 10, 64)
	if err != nil || word != "released" || perr != nil {
		return time.Time{}, fmt.Errorf("the previous supervisor did not release the embedded etcd (%q, %v)", line, err)
	}
	return time.Unix(0, ns), nil
}

// takeHandover reads and unsets envSupervisorHandover: nil when this
// supervisor replaces none.
func takeHandover(lookup func(string) (string, bool)) (*supervisorHandover, error) {
	v, ok := lookup(envSupervisorHandover)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(envSupervisorHandover) // not the workers'
	var h supervisorHandover
	if err := json.Unmarshal([]byte(v), &h); err != nil || h.Fleet == "" {
		return nil, fmt.Errorf("%s is malformed", envSupervisorHandover)
	}
	return &h, nil
}

// supervisorSuccessor replaces a fleet's supervisor with a new process of
// the executable on disk (an upgrade): the new supervisor takes the
// listening sockets and the embedded etcd's directories, starts its own
// workers (the first publishes the file's live part) and says it is ready;
// only then does this supervisor drain its workers and exit. While the new
// one starts, the old workers serve: the data plane has no gap. The
// channel is down from this supervisor's Release of its member until the
// successor's member serves on the same socket (measured by the e2e test,
// well under a second). If the successor does not become ready, it is
// killed, this supervisor's member resumes from the same data, and the old
// fleet serves on. It is used by one restart at a time.
type supervisorSuccessor struct {
	exe    string
	image  *os.File // the running executable, opened at start (openImage)
	args   []string
	log    *slog.Logger
	member *embedded.Server // nil with an external cluster
	fleet  string
	// ownsData: the member's data directory is serve's own (--data-dir).
	ownsData  bool
	generated string          // the generated management token, or ""
	track     *restartTracker // whose counts the successor carries on
	handover  *Handover
	// took is closed once the successor said it took the listeners: the
	// old workers, which served on since the go-ahead, then stop.
	took chan struct{}
}

// successorResult is what the successor said when it was ready.
type successorResult struct {
	pid        int
	workers    []int
	generation uint64
}

// replace starts the successor and waits until it is ready; ctx ends the
// wait (a shutdown of this supervisor), killing the successor. It then
// says the go-ahead and waits for the successor's answer (awaitTaken),
// this fleet serving on meanwhile, and then watches it for
// SuccessorWatch; a successor that gives no answer, or exits within the
// watch, is killed, the listeners taken back and the member resumed.
// On success the member's directories belong to the successor, the
// hand-over is done, and took is closed.
func (s *supervisorSuccessor) replace(ctx context.Context, run *restartRun) (successorResult, error) {
	h := supervisorHandover{Fleet: s.fleet, OwnsData: s.ownsData, TokenGenerated: s.generated != "", Restarts: s.track.state().Counts,
		RestartID: run.id(s.track), RestartStarted: run.started(s.track), PID: os.Getpid(), Generation: run.previous(s.track)}
	cmd := exec.Command(s.exe, s.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	var release net.Conn // this end of the release socket pair
	closeTheirs := func() error { return nil }
	if s.member != nil {
		h.EtcdData, h.EtcdSocket = s.member.DataDir(), s.member.SocketDir()
		ours, theirs, err := socketPair("etcd-release")
		if err != nil {
			return successorResult{}, fmt.Errorf("%w: a socket pair: %w", errNotStarted, err)
		}
		// Closed once the successor has its copy (below), so that its
		// exit ends this end's read; on every path.
		defer theirs.Close()
		closeTheirs = theirs.Close
		release, err = net.FileConn(ours)
		ours.Close()
		if err != nil {
			return successorResult{}, fmt.Errorf("%w: %w", errNotStarted, err)
		}
		defer release.Close()
		h.ReleaseFD = 3 + len(cmd.ExtraFiles)
		cmd.ExtraFiles = append(cmd.ExtraFiles, theirs)
	}
	b, _ := json.Marshal(h)
	cmd.Env = append(os.Environ(), envSupervisorHandover+"="+string(b))
	if s.generated != "" {
		cmd.Env = append(cmd.Env, admin.EnvToken+"="+s.generated)
	}
	var stopped atomic.Bool
	resume := func() {
		if !stopped.Load() {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.member.Resume(rctx); err != nil {
			s.log.Error("restart: the embedded etcd did not resume; the workers serve on without their channel", "error", err)
		}
	}
	p, err := s.handover.start(cmd)
	_ = closeTheirs()
	if err != nil {
		resume()
		return successorResult{}, fmt.Errorf("%w: %w", errNotStarted, err)
	}
	asked := make(chan struct{})
	if release == nil {
		close(asked)
	} else {
		// The data directory can have one member at a time: when the
		// successor asks, this one stops, keeping both directories, and
		// the successor starts its own on them.
		go func() {
			defer close(asked)
			line, err := bufio.NewReader(io.LimitReader(release, 64)).ReadString('\n')
			if err != nil || line != "release\n" {
				return // it exited, or the restart ended (release closed)
			}
			s.member.Stop()
			stopped.Store(true)
			_, _ = fmt.Fprintf(release, "released %d\n", time.Now().UnixNano())
		}()
	}
	status, err := s.handover.await(ctx, p) // one not ready is stopped: its workers see their supervisor gone and stop
	if err == nil {
		// Its ready line is read even after it exited (stopped, or tired
		// of waiting for the go-ahead while this one was stopped): this
		// supervisor does not watch its successor, so handing over to one
		// that is gone would leave the sockets to no one. Its exit may not
		// be seen yet; its go-ahead line, which only it reads, has no
		// reader then.
		select {
		case <-p.Exited():
			p.Kill() // its group: what it started may still hold the sockets
			err = fmt.Errorf("exited after it said ready, before the hand-over (%s)", p.State())
		default:
			if s.handover.successorGone() { // exited, not yet reaped
				p.Kill()
				err = errors.New("exited after it said ready, before the hand-over")
			}
		}
	}
	if err != nil {
		if release != nil {
			release.Close() // ends the goroutine above, if it still waits
		}
		<-asked
		resume()
		return successorResult{pid: p.PID()}, fmt.Errorf("the new supervisor (pid %d) %w", p.PID(), err)
	}
	s.handover.handedOver(p)
	s.log.Info("restart: the new supervisor has the go-ahead; this fleet serves until it answers that its workers accept",
		"new_pid", p.PID(), "wait", takenWait.String())
	// takeBack kills the new supervisor's group, takes the listeners
	// back and resumes the member; nil when the new one had handed them
	// on (TakeBack refused).
	takeBack := func(why string) error {
		end, terr := s.handover.TakeBack()
		if terr != nil {
			return nil
		}
		if release != nil {
			release.Close()
		}
		<-asked
		resume()
		return fmt.Errorf("the new supervisor (pid %d) %s (%s); this supervisor took the listeners back", p.PID(), why, end)
	}
	// This fleet serves on while it waits for the answer and then watches
	// the new supervisor, as a single process watches its successor: one
	// that exits just after it answered leaves its workers (which see it
	// gone, and stop) and the service to no one, while this fleet can
	// still take the listeners back.
	switch s.handover.watchTaken(ctx.Done(), p.Exited(), func() {
		s.log.Info("restart: the new supervisor's workers accept; this fleet serves on while it watches the new supervisor",
			"new_pid", p.PID(), "watch", SuccessorWatch.String())
	}) {
	case successorSilent:
		// It got the go-ahead but never said its workers accept: killed
		// with its group, this fleet, which never stopped, serves on.
		if err := takeBack("did not take the listeners after the go-ahead"); err != nil {
			return successorResult{pid: p.PID()}, err
		}
	case successorExited:
		if err := takeBack("exited just after it took over"); err != nil {
			return successorResult{pid: p.PID()}, err
		}
	}
	if s.member != nil {
		s.member.Release()
	}
	if s.took != nil {
		close(s.took)
	}
	return successorResult{pid: p.PID(), workers: pidsOf(status), generation: generationOf(status, 0)}, nil
}

// errNotStarted marks a successor that could not be started at all.
var errNotStarted = errors.New("the new supervisor could not be started")

// releasedData reports whether the data directory went to a successor.
func (s *supervisorSuccessor) releasedData() bool { return s.handover.HandedOver() }
