package propagate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// heldStrategy is a rollout whose first step lasts longer than a test:
// only an operator ends it.
func heldStrategy() reconf.Strategy {
	s := fleetStrategy(time.Minute)
	s.FinalBake = time.Minute
	return s
}

// firstShareEverywhere waits until every worker serves the first share of
// rollout cand (its acknowledgements in).
func firstShareEverywhere(t *testing.T, ws []fleetWorker, cand uint64) {
	t.Helper()
	waitFor(t, 15*time.Second, "the first share on every worker", func() bool {
		for _, w := range ws {
			ro := w.rollout()
			if ro == nil || ro.ID != cand || ro.Done() || ro.Pending != nil || ro.Share == 0 {
				return false
			}
		}
		return true
	})
}

// TestFleetControlNotWrittenFails: an operator's abort or promote that
// the channel does not take (etcd stopped) fails with
// cluster_unavailable, and the rollout runs on unchanged: the operator
// is never told that a rollback is under way when nothing changed.
func TestFleetControlNotWrittenFails(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	// A request to a stopped etcd fails after a second, not the default
	// three: each control below waits that long.
	var ws []fleetWorker
	for _, id := range []string{"w0", "w1"} {
		l := &rolloutEvents{}
		w := startWorker(t, s.Endpoints(), prefix, id, workerOpts{rtOpts: []reconf.Option{reconf.WithObserver(l)},
			chOpts: []ChannelOption{WithRequestTimeout(time.Second)}, follow: []Option{WithResyncInterval(200 * time.Millisecond)}})
		ws = append(ws, fleetWorker{w, l})
	}
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	cand := ws[0].stage(t, configYAML("gw", 2, "KEY1"), heldStrategy())
	firstShareEverywhere(t, ws, cand)

	s.Stop()
	for name, act := range map[string]func(context.Context) (reconf.RolloutStatus, error){
		"abort": ws[1].rt.AbortRollout, "promote": ws[0].rt.PromoteRollout,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := act(ctx)
		cancel()
		var e *reconf.Error
		if !errors.As(err, &e) || e.Reason != reconf.Reason("cluster_unavailable") {
			t.Errorf("%s with etcd stopped: status %s, error %v; want cluster_unavailable", name, st.Phase, err)
		}
	}
	for _, w := range ws {
		if ro := w.rollout(); ro == nil || ro.ID != cand || ro.Phase != reconf.Running {
			t.Errorf("worker %s: the rollout is %+v with etcd stopped, want it running", w.id, ro)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// Once etcd answers again, the operator's next try is taken (the
	// clients may take a moment to reconnect: each try until then fails
	// and says so).
	waitFor(t, 15*time.Second, "an abort taken once etcd is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := ws[1].rt.AbortRollout(ctx)
		return err == nil
	})
	waitRolloutsEnded(t, ws)
	for _, w := range ws {
		if ro := w.rollout(); ro.Phase != reconf.RolledBack {
			t.Errorf("worker %s: the rollout ended %s, want rolled back", w.id, ro.Phase)
		}
	}
}

// TestFleetPromoteAndAbortAtOnce: two operators, on two workers, promote
// and abort one rollout at the same moment. One decision wins in the
// channel and every worker ends the rollout its way; the other operator
// is told that nothing of theirs happened (an error), never a success.
func TestFleetPromoteAndAbortAtOnce(t *testing.T) {
	s := startServer(t)
	prefix := newPrefix()
	ws := startFleet(t, s.Endpoints(), prefix, 3)
	for _, w := range ws {
		traffic(t, w.worker, func(uint64) bool { return false })
	}
	for round := range 3 {
		cand := ws[0].stage(t, configYAML("gw", 2+round, "KEY1"), heldStrategy())
		firstShareEverywhere(t, ws, cand)
		type answer struct {
			st  reconf.RolloutStatus
			err error
		}
		promoted, aborted := make(chan answer, 1), make(chan answer, 1)
		start := make(chan struct{})
		run := func(act func(context.Context) (reconf.RolloutStatus, error), out chan<- answer) {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := act(ctx)
			out <- answer{st, err}
		}
		go run(ws[1].rt.PromoteRollout, promoted)
		go run(ws[2].rt.AbortRollout, aborted)
		close(start)
		p, a := <-promoted, <-aborted
		waitRolloutsEnded(t, ws)
		end := ws[0].rollout()
		for _, w := range ws[1:] {
			if ro := w.rollout(); ro.ID != end.ID || ro.Phase != end.Phase || ro.Result != end.Result {
				t.Fatalf("round %d: worker %s ended %s at %d, worker %s %s at %d", round, w.id, ro.Phase, ro.Result, ws[0].id, end.Phase, end.Result)
			}
		}
		waitFor(t, 10*time.Second, "every worker on the rollout's result", func() bool {
			for _, w := range ws {
				if w.version() != end.Result {
					return false
				}
			}
			return true
		})
		t.Logf("round %d: promote %v (%s), abort %v (%s): ended %s", round, p.err, p.st.Phase, a.err, a.st.Phase, end.Phase)
		switch end.Phase {
		case reconf.Promoted:
			if p.err != nil || a.err == nil {
				t.Errorf("round %d: promoted; the promote answered %v and the abort %v, want the abort alone to fail", round, p.err, a.err)
			}
		case reconf.RolledBack:
			if a.err != nil || p.err == nil {
				t.Errorf("round %d: rolled back; the abort answered %v and the promote %v, want the promote alone to fail", round, a.err, p.err)
			}
		}
	}
}
