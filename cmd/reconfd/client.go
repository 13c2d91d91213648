package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/adminclient"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/fleetstatus"
	"github.com/reconfhq/reconf/internal/millis"
	"github.com/reconfhq/reconf/internal/reasons"
)

// clientFlags are the management API client's flags.
type clientFlags struct {
	adminclient.Client
	output string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.Address, "address", "", "management API address host:port or URL (default $"+admin.EnvAddress+", else the one reconfd serve of this user)")
	cmd.Flags().StringVar(&f.Token, "token", "", "management bearer token (default $"+admin.EnvToken+", else the one reconfd serve generated)")
	cmd.Flags().StringVar(&f.output, "output", "text", "output format: text or json")
	cmd.Flags().DurationVar(&f.Timeout, "timeout", 90*time.Second, "how long to wait for the answer")
	cmd.Flags().StringVar(&f.CAFile, "ca-file", "", "CA bundle (PEM) that signed an https management listener's certificate (default $"+adminclient.EnvCA+", else the system's roots)")
	cmd.Flags().StringVar(&f.CertFile, "cert", "", "client certificate (PEM) for a management listener that asks for one (default $"+adminclient.EnvCert+")")
	cmd.Flags().StringVar(&f.KeyFile, "key", "", "client certificate's key (PEM) (default $"+adminclient.EnvKey+")")
}

// resolve checks --output, then resolves the client.
func (f *clientFlags) resolve(lookup env) (string, error) {
	if err := outputFlag(f.output); err != nil {
		return "", err
	}
	return f.Client.Resolve(lookup)
}

// expectFlags are reload's --expect, --expect-digest and --wait.
type expectFlags struct{ adminclient.Expect }

func (x *expectFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&x.File, "expect", "", "reload only if the source holds exactly this file's content (e.g. the rendered ConfigMap data)")
	cmd.Flags().StringVar(&x.Digest, "expect-digest", "", "reload only if the source's content has this digest (sha256:HEX)")
	cmd.Flags().DurationVar(&x.Wait, "wait", 0, "with --expect or --expect-digest: retry while the source does not hold the content yet, up to this long (e.g. 3m)")
}

func newReloadCmd(stdout io.Writer, lookup env) *cobra.Command {
	var f clientFlags
	var x expectFlags
	var rollout string
	var reapply bool
	cmd := &cobra.Command{
		Use:   "reload [--rollout NAME] [--reapply] [--address ADDR] [--token TOKEN] [--output json] [--expect FILE | --expect-digest sha256:HEX [--wait D]]",
		Short: "Ask a running reconfd to reload its configuration",
		Long: `Ask a running reconfd to reload its configuration file through the
management API (POST /admin/config/reload) and print the outcome.

With --expect FILE (the content as the mount will hold it) or
--expect-digest sha256:HEX the reload acts only on that exact content:
otherwise it is precondition-failed (412). With --wait it is retried
until the content arrives or the wait ends; any other outcome ends it.

With --rollout NAME the change is staged with that strategy (a declared
one or a preset); all_at_once publishes at once. Without it the
configuration's rollout.default applies, if set. A file that holds the
content a rollout rolled back is refused (rolled_back_content) until it
changes; --reapply accepts it deliberately. See docs/rollout.md.

Exit status: 0 when the outcome is published or no-op, 1 for any other
outcome or when the API cannot be reached, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			if f.IfMatch, err = x.IfMatch(); err != nil {
				return err
			}
			q := url.Values{}
			if cmd.Flags().Changed("rollout") {
				q.Set("rollout", rollout)
			}
			if reapply {
				q.Set("reapply", "1")
			}
			target := base + admin.ReloadPath
			if len(q) > 0 {
				target += "?" + q.Encode()
			}
			status, body, err := x.Retry(cmd.Context(), func() (int, []byte, error) {
				return f.Call(cmd.Context(), http.MethodPost, target, []byte("{}"))
			})
			if err != nil {
				return exitcode.Fail("%v", err)
			}
			var res reconf.Result
			if json.Unmarshal(body, &res) != nil || res.Outcome == 0 {
				return f.Refused(status, body)
			}
			if f.output == "json" {
				fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
			} else {
				printReload(stdout, res)
			}
			if !res.Outcome.OK() {
				return exitcode.Failed
			}
			return nil
		},
	}
	f.register(cmd)
	x.register(cmd)
	cmd.Flags().StringVar(&rollout, "rollout", "", "stage the change with this rollout strategy (all_at_once: publish at once)")
	cmd.Flags().BoolVar(&reapply, "reapply", false, "accept the content a rollout rolled back, which a plain reload refuses (rolled_back_content)")
	return cmd
}

func printReload(w io.Writer, r reconf.Result) {
	if r.Reason == reconf.ReasonRolledBack {
		// The answer's advice names the management API; at the command
		// line the flag re-applies.
		r.Message = reasons.RolledBackMessage(r.Generation, "reconfd reload --reapply")
	}
	fmt.Fprintf(w, "%s (%s): %s\n", r.Outcome, r.Reason, r.Message)
	fmt.Fprintf(w, "  generation %d -> %d, trigger %s, %.1f ms\n", r.PreviousGeneration, r.Generation, r.Trigger, millis.Of(r.Duration))
	if r.RestartRequiredCount > 0 {
		fmt.Fprintf(w, "  restart-required fields (%d): %s\n", r.RestartRequiredCount, strings.Join(r.RestartRequiredFields, ", "))
	}
	printProblems(w, r.Problems, r.ProblemCount)
}

// printProblems writes one problem a line and, when the list was cut, how
// many more there are.
func printProblems(w io.Writer, probs []reconf.Problem, count int) {
	for _, p := range probs {
		fmt.Fprintf(w, "  %s\n", p)
	}
	if more := count - len(probs); more > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", more)
	}
}

func newStatusCmd(stdout io.Writer, lookup env) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "status [--address ADDR] [--token TOKEN] [--output json]",
		Short: "Show a running reconfd's configuration status",
		Long: `Show a running reconfd's configuration status through the management API
(GET /admin/config/status): the active generation, the last success and
failure, retained generations and pinned requests of the worker that
answers and, for a cluster, the cluster version, whether every worker
has converged on it, and one row per worker.

Exit status: 0 when the status was read, 1 otherwise, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			var st admin.StatusResponse
			body, err := f.Get(cmd.Context(), base+admin.StatusPath, "status", &st)
			if err != nil {
				return err
			}
			if f.output == "json" {
				fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
				return nil
			}
			printStatus(stdout, st)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func printStatus(w io.Writer, st admin.StatusResponse) {
	fmt.Fprintln(w, fleetstatus.Convergence(st))
	if line := fleetstatus.GenerationLine(st); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "active generation:    %d\n", st.ActiveGeneration)
	if s := st.LastSuccess; s != nil {
		fmt.Fprintf(w, "last success:         %s (%s) by %s at %s, generation %d\n", s.Outcome, s.Reason, s.Trigger, s.Time.Format(time.RFC3339), s.Generation)
	} else {
		fmt.Fprintf(w, "last success:         none\n")
	}
	if s := st.LastFailure; s != nil {
		fmt.Fprintf(w, "last failure:         %s (%s) by %s at %s\n", s.Outcome, s.Reason, s.Trigger, s.Time.Format(time.RFC3339))
	} else {
		fmt.Fprintf(w, "last failure:         none\n")
	}
	if st.RetentionBudget > 0 {
		fmt.Fprintf(w, "retained generations: %d of %d\n", st.RetainedGenerations, st.RetentionBudget)
	} else {
		fmt.Fprintf(w, "retained generations: %d\n", st.RetainedGenerations) // a server that does not say
	}
	if st.RetentionPressure {
		fmt.Fprintf(w, "retention pressure:   the budget is full; a change is refused retention-blocked until pinned work drains\n")
	}
	fmt.Fprintf(w, "pinned requests:      %d\n", st.Pinned)
	fmt.Fprintf(w, "attempt in flight:    %t\n", st.Busy)
	fmt.Fprintf(w, "source:               %s\n", st.Source)
	if st.Rollout != nil {
		printRollout(w, st.Rollout, time.Now())
	}
	fleetstatus.WriteTLS(w, st.Extra)
	fleetstatus.WriteConcurrency(w, st.Extra)
	fleetstatus.WriteFleet(w, st.Extra)
}
