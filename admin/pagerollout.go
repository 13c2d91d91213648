package admin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
)

// rolloutWindower is what a runtime has when it measures the current
// step of a rollout across its fleet (a *reconf.Runtime's fleet side does): the status
// page shows both generations' figures since the step began, the fleet's
// as the driver will judge them, not the answering worker's alone.
type rolloutWindower interface {
	FleetRolloutWindow(ctx context.Context) (st reconf.RolloutState, active, candidate reconf.Counts, ok bool, err error)
}

// pageRollout is the status page's rollout panel: the rollout in
// progress, or the last one. It holds states, numbers and names of
// strategies and deciders, never configuration content.
type pageRollout struct {
	reconf.RolloutStatus
	InProgress bool
	Controls   bool // the page offers pause, resume, promote and abort
	// Current holds both generations' figures across the fleet since the
	// current step began (nil when the runtime does not measure them).
	Current *pageWindow
	Last    *pageWindow // the last judged window
	NextIn  string      // how long until the next step is judged
}

// pageWindow is one window's figures, side by side.
type pageWindow struct {
	Start, End        time.Time
	Active, Candidate pageFigures
	EarlierBaseline   bool
	// Local: the fleet's counts could not be read; the figures are the
	// answering worker's alone.
	Local bool
}

// pageFigures is one generation's figures as the page prints them.
type pageFigures struct {
	Generation uint64
	Requests   uint64
	Failures   uint64
	Rate       string // failures as a percentage of requests
	P99        string // "-" with no request
}

func figuresOf(f reconf.Figures) pageFigures {
	p := pageFigures{Generation: f.Generation, Requests: f.Requests, Failures: f.Failures, Rate: fmt.Sprintf("%.2f%%", f.FailureRate()), P99: "-"}
	if f.Requests > 0 {
		p.P99 = fmt.Sprintf("%.1f ms", float64(f.P99)/float64(time.Millisecond))
	}
	return p
}

// rolloutPanel builds the panel from st (nil: no rollout ever ran here).
func (s *Server) rolloutPanel(ctx context.Context, st *reconf.RolloutStatus, now time.Time) *pageRollout {
	if st == nil {
		return nil
	}
	p := &pageRollout{RolloutStatus: *st, InProgress: !st.Done()}
	p.Controls = p.InProgress && s.o.rollouts != nil
	if w := st.LastWindow; w != nil {
		p.Last = &pageWindow{Start: w.Start, End: w.End, Active: figuresOf(w.Active), Candidate: figuresOf(w.Candidate), EarlierBaseline: w.EarlierBaseline}
	}
	if wr, ok := fleet.Of(s.o.rollouts).(rolloutWindower); ok && p.InProgress {
		cur, active, cand, ok, err := wr.FleetRolloutWindow(ctx)
		if err != nil {
			s.o.logger.LogAttrs(ctx, slog.LevelWarn, "admin: the fleet's rollout counts could not be read; the page shows this worker's", slog.Any("error", err))
		}
		if ok && cur.ID == st.ID {
			p.Current = &pageWindow{Start: cur.StepStarted, End: now, Local: err != nil,
				Active: figuresOf(active.Figures(cur.Active)), Candidate: figuresOf(cand.Figures(cur.Candidate))}
		}
	}
	if st.Phase == reconf.Running && !st.NextStep.IsZero() {
		p.NextIn = max(st.NextStep.Sub(now), 0).Round(time.Second).String()
	}
	return p
}

// sharePercent prints a share in basis points as a percentage.
func sharePercent(bp uint32) string {
	if bp%100 == 0 {
		return fmt.Sprintf("%d%%", bp/100)
	}
	return fmt.Sprintf("%.2f%%", float64(bp)/100)
}
