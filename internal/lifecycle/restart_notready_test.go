package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// envTestChild turns the test binary into the new process of a restart
// or a hand-over (TestMain): "fail" says Failed and exits 2 before ready,
// "linger" says Failed and then does not exit (its shutdown hangs).
const envTestChild = "RECONF_MAIN_TEST_CHILD"

const childReason = "the test child's reason"

// valid is a configuration the restarted gateway loads.
const valid = `
routing: {default_route: s}
backends:
  - {name: s, kind: stub, model: m}
`

func writeFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testChild(mode string) int {
	if child, ok := handedOnChildren[mode]; ok {
		return child()
	}
	if child, ok := goAheadChildren[mode]; ok {
		return child()
	}
	if child, ok := takenChildren[mode]; ok {
		return child()
	}
	_ = handoff.Failed(childReason)
	if mode == "linger" {
		time.Sleep(time.Minute) // until its parent stops it
	}
	return 2
}

// notReadyCases: only a new process that exited by itself "exited before
// it was ready"; one that said Failed and lingered until the timeout was
// stopped by its parent, and the message says so with its reason. Before,
// the lingerer was reported as "exited before it was ready (signal:
// killed)", the signal being its parent's.
var notReadyCases = []notReadyCase{
	{"fail", "exited before it was ready (exit status 2): " + childReason, true, 20 * time.Second},
	{"linger", "did not become ready within 3s (", false, 3 * time.Second},
}

// notReadyCase is a new process's mode, what the message must hold,
// whether it exits by itself, and how long its parent waits.
type notReadyCase struct {
	mode    string
	want    string
	exited  bool
	timeout time.Duration
}

func checkNotReady(t *testing.T, msg, want string, exited bool) {
	t.Helper()
	t.Log(msg)
	if !strings.Contains(msg, want) || !strings.Contains(msg, childReason) {
		t.Errorf("message %q does not hold %q and the child's reason", msg, want)
	}
	if !exited && (strings.Contains(msg, "exited") || !strings.Contains(msg, "it said: "+childReason+"; it was stopped")) {
		t.Errorf("message %q does not say the child was stopped after it said its reason, or says it exited", msg)
	}
}

// eachNotReadyCase runs body for each of notReadyCases, with this test
// binary as the new process in the case's mode.
func eachNotReadyCase(t *testing.T, body func(t *testing.T, exe string, c notReadyCase)) {
	if !handoff.Supported {
		t.Skip(handoff.ErrUnsupported)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range notReadyCases {
		t.Run(c.mode, func(t *testing.T) {
			t.Setenv(envTestChild, c.mode)
			body(t, exe, c)
		})
	}
}

func TestRestartNewProcessNotReady(t *testing.T) {
	eachNotReadyCase(t, func(t *testing.T, exe string, c notReadyCase) {
		ctx := context.Background()
		g, log := quietGateway(t)
		r := &SelfRestarter{g: g, log: log, exe: exe, args: []string{"-test.run=^$"}, handover: newHandover(nil, c.timeout)}
		begun, err := r.Restart(ctx, "test")
		if err != nil || begun.Outcome != restartapi.Running {
			t.Fatalf("Restart: %+v, %v; want it running", begun, err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, ok := r.WaitRestart(wctx, begun.ID)
		if !ok || !res.Done || res.Outcome != restartapi.Failed || res.Reason != restartapi.ReasonNotReady {
			t.Fatalf("result %+v; want a finished restart-failed %s", res, restartapi.ReasonNotReady)
		}
		checkNotReady(t, res.Message, c.want, c.exited)
		if !strings.HasSuffix(res.Message, "; this process keeps serving") {
			t.Errorf("message %q does not say this process keeps serving", res.Message)
		}
	})
}

func TestHandoverNewSupervisorNotReady(t *testing.T) {
	eachNotReadyCase(t, func(t *testing.T, exe string, c notReadyCase) {
		track := &restartTracker{}
		run, _, ok := track.begin(1)
		if !ok {
			t.Fatal("the restart did not begin")
		}
		defer track.finish(run, func(res *restartapi.Result) { res.Outcome = restartapi.Failed })
		s := &supervisorSuccessor{exe: exe, args: []string{"-test.run=^$"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			fleet: "test", track: track, handover: newHandover(nil, c.timeout)}
		res, err := s.replace(context.Background(), run)
		if err == nil {
			t.Fatalf("replace: %+v; want an error", res)
		}
		if res.pid == 0 || !strings.HasPrefix(err.Error(), "the new supervisor (pid ") {
			t.Errorf("replace: %+v, %v; want the new supervisor's pid", res, err)
		}
		checkNotReady(t, err.Error(), c.want, c.exited)
	})
}

// fakeCountingRuntime is a fake admin.Runtime (fault injection: it only
// counts what reaches it).
type fakeCountingRuntime struct{ reloads int }

func (f *fakeCountingRuntime) Reload(context.Context, reconf.Trigger) (reconf.Result, error) {
	f.reloads++
	return reconf.Result{Outcome: reconf.Published}, nil
}

func (f *fakeCountingRuntime) Status() reconf.Status { return reconf.Status{} }

// A process that a restart started answers busy to reloads until it told
// its predecessor it is ready: until then the predecessor may still stop
// it and serve on, and a reload it acknowledged would be lost. After
// MarkReady, reloads reach the runtime.
func TestSuccessorAnswersBusyUntilReady(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rs := NewSelfRestarter(nil, log, "", nil, nil, Inheritance{Restarted: true})
	rt := &fakeCountingRuntime{}
	guard := Guard{Runtime: rt, Running: rs.Running, Handover: rs.Handover()}
	for _, trig := range []reconf.Trigger{reconf.TriggerAPI, reconf.TriggerSIGHUP} {
		res, err := guard.Reload(context.Background(), trig)
		if err != nil || res.Outcome != reconf.Busy || rt.reloads != 0 {
			t.Fatalf("a %s reload before ready: %v %v, %d reached the runtime; want busy and none", trig, res.Outcome, err, rt.reloads)
		}
	}
	rs.MarkReady()
	if res, err := guard.Reload(context.Background(), reconf.TriggerAPI); err != nil || res.Outcome != reconf.Published || rt.reloads != 1 {
		t.Fatalf("a reload once ready: %v %v, %d reached the runtime", res.Outcome, err, rt.reloads)
	}
	// A process no restart started serves reloads at once.
	fresh := NewSelfRestarter(nil, log, "", nil, nil, Inheritance{})
	if fresh.Running() {
		t.Fatal("a process no restart started counts as restarting")
	}
}
