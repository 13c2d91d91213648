package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
)

// rolloutActions are reconfd rollout's subcommands that act.
var rolloutActions = map[string]string{
	"pause":   "stop the rollout's clock: the share holds, no step is judged",
	"resume":  "restart a paused rollout's clock: the step is judged one interval later",
	"promote": "promote the candidate now: it becomes the only active generation",
	"abort":   "roll back now: the previous content is active again as a new generation",
}

func newRolloutCmd(stdout io.Writer, lookup env) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "rollout [status|pause|resume|promote|abort] [--address ADDR] [--token TOKEN] [--output json]",
		Short: "Show or steer a running reconfd's staged rollout",
		Long: `Show the staged rollout of a running reconfd (GET /admin/rollout): both
generations, the candidate's share, the last window's health figures side
by side, the last decision and the next step. With an action, steer it:

  pause    ` + rolloutActions["pause"] + `
  resume   ` + rolloutActions["resume"] + `
  promote  ` + rolloutActions["promote"] + `
  abort    ` + rolloutActions["abort"] + `

A reload starts a rollout: reconfd reload --rollout NAME (see
docs/rollout.md).

Exit status: 0 on success, 1 when no rollout is in progress for an action
or the API cannot be reached, 2 usage.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "status"
			if len(args) == 1 {
				action = args[0]
			}
			if _, ok := rolloutActions[action]; !ok && action != "status" {
				return exitcode.Usagef("unknown rollout action %q; want status, pause, resume, promote or abort", action)
			}
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			var doc admin.RolloutResponse
			var body []byte
			if action == "status" {
				if body, err = f.Get(cmd.Context(), base+admin.RolloutPath, "rollout", &doc); err != nil {
					return err
				}
			} else {
				status, b, err := f.Call(cmd.Context(), http.MethodPost, base+admin.RolloutPath+"/"+action, []byte("{}"))
				if err != nil {
					return exitcode.Fail("%v", err)
				}
				if status != http.StatusOK {
					return f.Refused(status, b)
				}
				if err := json.Unmarshal(b, &doc); err != nil {
					return exitcode.Fail("the management API's answer is not JSON: %v", err)
				}
				body = b
			}
			if f.output == "json" {
				fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
				return nil
			}
			if doc.Rollout == nil {
				fmt.Fprintf(stdout, "no rollout has run; active generation %d\n", doc.ActiveGeneration)
			} else {
				printRollout(stdout, doc.Rollout, time.Now())
			}
			fmt.Fprintf(stdout, "recorded generations: %s\n", joinIDs(doc.RecordedGenerations))
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newRollbackCmd(stdout io.Writer, lookup env) *cobra.Command {
	var f clientFlags
	var to uint64
	cmd := &cobra.Command{
		Use:   "rollback [--to GENERATION] [--address ADDR] [--token TOKEN] [--output json]",
		Short: "Roll a running reconfd back to an earlier configuration",
		Long: `Roll a running reconfd back (POST /admin/config/rollback).

With --to GENERATION, publish that recorded generation's content again as
a new generation (numbers never go back); reconfd rollout lists the
recorded generations. Without it, abort the rollout in progress, else
revert to the generation published before the active one.

The content rolled away from is then refused by a plain reload of the
unchanged file (invalid / rolled_back_content) until the file changes.

Exit status: 0 when the rollback is published, 1 for any other outcome
or when the API cannot be reached, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			u := base + admin.RollbackPath
			if cmd.Flags().Changed("to") {
				if to == 0 {
					return exitcode.Usagef("--to must be a generation number")
				}
				u += "?to=" + url.QueryEscape(strconv.FormatUint(to, 10))
			}
			status, body, err := f.Call(cmd.Context(), http.MethodPost, u, []byte("{}"))
			if err != nil {
				return exitcode.Fail("%v", err)
			}
			var res reconf.Result
			if json.Unmarshal(body, &res) == nil && res.Outcome != 0 {
				if f.output == "json" {
					fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
				} else {
					printReload(stdout, res)
				}
				if !res.Outcome.OK() {
					return exitcode.Failed
				}
				return nil
			}
			var doc admin.RolloutResponse
			if status == http.StatusOK && json.Unmarshal(body, &doc) == nil && doc.Rollout != nil {
				if f.output == "json" {
					fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
				} else {
					printRollout(stdout, doc.Rollout, time.Now())
				}
				return nil
			}
			return f.Refused(status, body)
		},
	}
	cmd.Flags().Uint64Var(&to, "to", 0, "the recorded generation whose content to publish again")
	f.register(cmd)
	return cmd
}

// printRollout writes a rollout's state: both generations, the share,
// the last window's figures side by side, the last decision and the next
// step.
func printRollout(w io.Writer, ro *reconf.RolloutStatus, now time.Time) {
	fmt.Fprintf(w, "rollout:              %d (%s), %s\n", ro.ID, ro.Strategy.Name, ro.Phase)
	fmt.Fprintf(w, "  generations:        active %d, candidate %d\n", ro.Active, ro.Candidate)
	fmt.Fprintf(w, "  step:               %d, candidate share %s\n", ro.Step, sharePercent(ro.Share))
	fmt.Fprintf(w, "  last decision:      %s by %s (%s)\n", ro.Decision, dash(ro.Decider), dash(ro.Reason))
	if ro.Done() {
		fmt.Fprintf(w, "  ended:              %s, generation %d active\n", ro.Ended.Format(time.RFC3339), ro.Result)
	} else if !ro.NextStep.IsZero() {
		fmt.Fprintf(w, "  next step:          %s (in %s)\n", ro.NextStep.Format(time.RFC3339), ro.NextStep.Sub(now).Round(time.Second))
	} else {
		fmt.Fprintf(w, "  next step:          none until resumed\n")
	}
	if p := ro.Pending; p != nil && !ro.Done() {
		fmt.Fprintf(w, "  pending:            widening to %s decided %s, waits for every worker's acknowledgement", sharePercent(p.Share), p.Decided.Format(time.RFC3339))
		if len(ro.WaitingOn) > 0 {
			fmt.Fprintf(w, "; waiting on %s", strings.Join(ro.WaitingOn, ", "))
		}
		fmt.Fprintln(w)
	}
	if len(ro.Unacknowledged) > 0 && !ro.Done() {
		fmt.Fprintf(w, "  unacknowledged:     %s (the step took effect without them; they give the candidate to nobody)\n", strings.Join(ro.Unacknowledged, ", "))
	}
	if win := ro.LastWindow; win != nil {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  last window\tgeneration\trequests\tfailures\tfailure rate\tp99\n")
		for _, side := range []struct {
			name string
			f    reconf.Figures
		}{{"  active", win.Active}, {"  candidate", win.Candidate}} {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f%%\t%s\n", side.name, side.f.Generation, side.f.Requests, side.f.Failures, side.f.FailureRate(), side.f.P99)
		}
		_ = tw.Flush()
		if win.EarlierBaseline {
			fmt.Fprintf(w, "  (the active figures are from before the candidate served everything)\n")
		}
	}
	if v := ro.LastVerdict; v != nil {
		fmt.Fprintf(w, "  verdict:            %s (%s) %s\n", v.Health, v.Reason, v.Detail)
	}
}

// sharePercent renders basis points as a percentage.
func sharePercent(bp uint32) string {
	return strconv.FormatFloat(float64(bp)/100, 'f', -1, 64) + "%"
}

func joinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "none"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ", ")
}
