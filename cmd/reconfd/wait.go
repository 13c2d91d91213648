package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/fleetstatus"
)

// waitPoll is how often wait reads the status.
const waitPoll = 200 * time.Millisecond

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
		last    *fleetstatus.Verdict
		lastErr error
	)
	for {
		rf := f
		rf.Timeout = max(min(time.Until(deadline), 10*time.Second), time.Millisecond)
		var st admin.StatusResponse
		if _, err := rf.Get(ctx, base+admin.StatusPath, "status", &st); err != nil {
			lastErr = err
		} else {
			v := fleetstatus.Judge(st, gen)
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
func printWait(w io.Writer, output string, v fleetstatus.Verdict, code int) error {
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
