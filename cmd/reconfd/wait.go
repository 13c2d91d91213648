package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/propagate"
)

// waitPoll is how often wait reads the status.
const waitPoll = 200 * time.Millisecond

// waitVerdict is what one status document says of a generation.
type waitVerdict struct {
	// Result is "converged", "waiting", "rolled_back" or "superseded".
	Result     string   `json:"result"`
	Generation uint64   `json:"generation"`
	Summary    string   `json:"summary"`
	Lagging    []string `json:"lagging,omitempty"`
}

func newWaitCmd(stdout io.Writer, lookup env) *cobra.Command {
	var (
		f   clientFlags
		gen uint64
	)
	cmd := &cobra.Command{
		Use:   "wait --generation G [--timeout D] [--address ADDR] [--token TOKEN] [--output json]",
		Short: "Wait until every live worker serves a generation to all of its traffic",
		Long: `Wait until every live worker of the fleet serves generation G to all of
its traffic, reading the management status (GET /admin/config/status)
every 200 ms: the cluster version is G, every live worker's row holds G,
and no rollout of G is still running or paused (a rollout serves G to a
share of the traffic only). A worker whose lease lapsed is not live; its
host is named as unreachable. A single process converges when its active
generation is G.

Exit status: 0 converged; 1 the status could not be read (at the
deadline); 2 usage; 3 timed out (--timeout, default 90s), naming the
lagging workers and why; 4 G was rolled back; 5 G was superseded by a
newer generation before every worker served it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if gen == 0 {
				return exitcode.Usagef("--generation is required (a generation number, 1 or more)")
			}
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			return waitFor(cmd.Context(), stdout, f, base, gen)
		},
	}
	f.register(cmd)
	cmd.Flags().Uint64Var(&gen, "generation", 0, "the generation to wait for")
	return cmd
}

// waitFor polls the status until judge decides, or the deadline passes.
func waitFor(ctx context.Context, w io.Writer, f clientFlags, base string, gen uint64) error {
	deadline := time.Now().Add(f.Timeout)
	var (
		last    *waitVerdict
		lastErr error
	)
	for {
		rf := f
		rf.Timeout = max(min(time.Until(deadline), 10*time.Second), time.Millisecond)
		var st admin.StatusResponse
		if _, err := rf.Get(ctx, base+admin.StatusPath, "status", &st); err != nil {
			lastErr = err
		} else {
			v := judgeWait(st, gen)
			last, lastErr = &v, nil
			switch v.Result {
			case "converged":
				return printWait(w, f.output, v, 0)
			case "rolled_back":
				return printWait(w, f.output, v, exitcode.WaitRolledBack)
			case "superseded":
				return printWait(w, f.output, v, exitcode.WaitSuperseded)
			}
		}
		if time.Now().After(deadline) {
			if last == nil {
				return lastErr
			}
			last.Result = "timeout"
			return printWait(w, f.output, *last, exitcode.WaitTimeout)
		}
		select {
		case <-ctx.Done():
			return exitcode.Fail("%v", ctx.Err())
		case <-time.After(min(waitPoll, max(time.Until(deadline), 0))):
		}
	}
}

// printWait prints a verdict and returns the exit error for code.
func printWait(w io.Writer, output string, v waitVerdict, code int) error {
	if output == "json" {
		b, _ := json.Marshal(v)
		fmt.Fprintln(w, string(b))
	} else {
		line := map[string]string{
			"converged":   "generation %d converged: ",
			"timeout":     "timed out waiting for generation %d: ",
			"rolled_back": "generation %d was rolled back: ",
			"superseded":  "generation %d was superseded: ",
		}[v.Result]
		fmt.Fprintf(w, line+"%s\n", v.Generation, v.Summary)
		for _, l := range v.Lagging {
			fmt.Fprintf(w, "  lagging: %s\n", l)
		}
	}
	if code == 0 {
		return nil
	}
	return &exitcode.Error{Code: code}
}

// rolloutOf returns the rollout of gen that the status shows, or nil.
// Today that is the answering worker's own (Status.Rollout); the fleet's
// rollout state, once status carries it, is read here as well, and wins.
func rolloutOf(st admin.StatusResponse, gen uint64) *reconf.RolloutStatus {
	if r := st.Rollout; r != nil && (r.Candidate == gen || r.ID == gen) {
		return r
	}
	return nil
}

// judgeWait decides what st says of generation gen.
func judgeWait(st admin.StatusResponse, gen uint64) waitVerdict {
	v := waitVerdict{Result: "waiting", Generation: gen}
	if r := rolloutOf(st, gen); r != nil {
		switch r.Phase {
		case reconf.RolledBack:
			v.Result, v.Summary = "rolled_back", fmt.Sprintf("the rollout ended rolled back (%s by %s); generation %d is active", orDash(r.Reason), orDash(r.Decider), r.Active)
			return v
		case reconf.Running, reconf.Paused:
			v.Summary = fmt.Sprintf("its rollout is %s at %.2f%% of the traffic", r.Phase, float64(r.Share)/100)
			v.Lagging = []string{"the rollout of generation " + fmt.Sprint(gen) + " is " + r.Phase.String()}
			return v
		}
	}
	raw := func(k string) json.RawMessage {
		b, _ := st.Extra[k].(json.RawMessage)
		return b
	}
	if raw("cluster_version") == nil && raw("cluster_reachable") == nil {
		// A single process.
		switch {
		case st.ActiveGeneration == gen:
			v.Result, v.Summary = "converged", "the single process serves it"
		case st.ActiveGeneration > gen:
			v.Result, v.Summary = "superseded", fmt.Sprintf("the single process serves generation %d", st.ActiveGeneration)
		default:
			v.Summary = fmt.Sprintf("the single process serves generation %d", st.ActiveGeneration)
			v.Lagging = []string{fmt.Sprintf("this process at %d", st.ActiveGeneration)}
		}
		return v
	}
	var (
		version   *uint64
		reachable = true
		rows      []propagate.WorkerRow
		gone      []propagate.HostRow
	)
	_ = json.Unmarshal(raw("cluster_version"), &version)
	if b := raw("cluster_reachable"); b != nil {
		_ = json.Unmarshal(b, &reachable)
	}
	_ = json.Unmarshal(raw("workers"), &rows)
	_ = json.Unmarshal(raw("unreachable_hosts"), &gone)
	if !reachable || version == nil {
		v.Summary = "the fleet's state is unknown: etcd is unreachable from the answering worker"
		return v
	}
	if *version > gen {
		v.Result, v.Summary = "superseded", fmt.Sprintf("the cluster is at version %d", *version)
		return v
	}
	v.Summary = propagate.Summarize(gen, rows).String(gen)
	if *version < gen {
		v.Summary += fmt.Sprintf("; the cluster is at version %d", *version)
	}
	for _, r := range rows {
		if r.AppliedVersion == gen { // degraded or not, it serves gen
			continue
		}
		l := fmt.Sprintf("%s at %d (%s", r.ID, r.AppliedVersion, r.State)
		if r.LastError != "" {
			l += ": " + string(r.LastError)
		}
		v.Lagging = append(v.Lagging, l+")")
	}
	var hosts []string
	for _, h := range gone {
		hosts = append(hosts, fmt.Sprintf("%s (last at version %d)", h.Host, h.LastVersion))
	}
	if len(hosts) > 0 {
		v.Summary += "; unreachable, not counted: " + strings.Join(hosts, ", ")
	}
	switch {
	case len(rows) == 0:
		v.Lagging = append(v.Lagging, "no live worker")
	case *version == gen && len(v.Lagging) == 0:
		v.Result = "converged"
	}
	return v
}
