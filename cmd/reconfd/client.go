package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/adminclient"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/millis"
	"github.com/reconfhq/reconf/internal/termtext"
	"github.com/reconfhq/reconf/propagate"
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
	cmd := &cobra.Command{
		Use:   "reload [--rollout NAME] [--address ADDR] [--token TOKEN] [--output json] [--expect FILE | --expect-digest sha256:HEX [--wait D]]",
		Short: "Ask a running reconfd to reload its configuration",
		Long: `Ask a running reconfd to reload its configuration file through the
management API (POST /admin/config/reload) and print the outcome.

With --expect FILE (the content as the mount will hold it) or
--expect-digest sha256:HEX the reload acts only on that exact content:
otherwise it is precondition-failed (412). With --wait it is retried
until the content arrives or the wait ends; any other outcome ends it.

With --rollout NAME the change is staged with that strategy (a declared
one or a preset); all_at_once publishes at once. Without it the
configuration's rollout.default applies, if set. See docs/rollout.md.

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
			target := base + admin.ReloadPath
			if cmd.Flags().Changed("rollout") {
				target += "?rollout=" + url.QueryEscape(rollout)
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
	return cmd
}

func printReload(w io.Writer, r reconf.Result) {
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
	fmt.Fprintln(w, convergence(st))
	if line := generationLine(st); line != "" {
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
	printTLS(w, st.Extra)
	printConcurrency(w, st.Extra)
	printFleet(w, st.Extra)
}

// printTLS prints the data plane's certificate in service, when it
// serves HTTPS.
func printTLS(w io.Writer, extra map[string]any) {
	raw, _ := extra["data_plane_tls"].(json.RawMessage)
	var t gateway.TLSStatus
	if raw == nil || json.Unmarshal(raw, &t) != nil {
		return
	}
	fmt.Fprintf(w, "data plane TLS:       %s, valid until %s\n", t.Subject, t.NotAfter.Format(time.RFC3339))
}

// printConcurrency prints each backend's limiter as the answering process
// sees it, and whether a cluster worker's gate runs on local shares;
// nothing when the status has no concurrency field.
func printConcurrency(w io.Writer, extra map[string]any) {
	raw, _ := extra["concurrency"].(json.RawMessage)
	var backends map[string]gate.Stats
	if raw == nil || json.Unmarshal(raw, &backends) != nil {
		return
	}
	if b, _ := extra["gate_degraded"].(json.RawMessage); b != nil {
		var degraded bool
		_ = json.Unmarshal(b, &degraded)
		state := "ok (limits are the fleet's)"
		if degraded {
			state = "DEGRADED: etcd unreachable; each limit runs on this worker's local share"
		}
		fmt.Fprintf(w, "concurrency gate:     %s\n", state)
	}
	fmt.Fprintf(w, "concurrency:          %d backend(s)\n", len(backends))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  BACKEND\tLIMIT\tCAPACITY\tIN FLIGHT\tWAITING")
	for _, name := range slices.Sorted(maps.Keys(backends)) {
		s := backends[name]
		limit, capacity := "unlimited", "-"
		if s.Limit > 0 {
			limit, capacity = strconv.Itoa(s.Limit), strconv.Itoa(s.Capacity)
			if s.Degraded {
				capacity += " (local share)"
			}
		}
		// A row is cleaned before the tabwriter measures it (termtext).
		fmt.Fprint(tw, termtext.Clean(fmt.Sprintf("  %s\t%s\t%s\t%d\t%d\n", name, limit, capacity, s.InFlight, s.Waiting)))
	}
	_ = tw.Flush()
}

// printFleet prints the cluster fields a worker of a cluster adds to its
// status (see propagate.Follower.StatusFields); nothing without them.
func printFleet(w io.Writer, extra map[string]any) {
	raw := func(k string) json.RawMessage {
		b, _ := extra[k].(json.RawMessage)
		return b
	}
	if raw("cluster_version") == nil {
		return
	}
	var (
		version   *uint64
		converged bool
		reachable = true
		drift     bool
		rows      []propagate.WorkerRow
	)
	_ = json.Unmarshal(raw("cluster_version"), &version)
	_ = json.Unmarshal(raw("converged"), &converged)
	_ = json.Unmarshal(raw("bootstrap_drift"), &drift)
	if b := raw("cluster_reachable"); b != nil {
		_ = json.Unmarshal(b, &reachable)
	}
	_ = json.Unmarshal(raw("workers"), &rows)
	if !reachable || version == nil {
		fmt.Fprintf(w, "cluster:              unreachable from the answering worker; the fleet's state is unknown\n")
		return
	}
	state := "converged"
	if !converged {
		state = "not converged"
	}
	if drift {
		state += ", bootstrap drift"
	}
	var self propagate.WorkerRow
	if json.Unmarshal(raw("worker"), &self) == nil && self.ID != "" {
		fmt.Fprintf(w, "answered by worker:   %s (the lines above are its own view)\n", self.ID)
	}
	fmt.Fprintf(w, "cluster version:      %d (%s)\n", *version, state)
	var pub *propagate.Provenance
	if json.Unmarshal(raw("published"), &pub) == nil && pub != nil {
		by := pub.Publisher
		fmt.Fprintf(w, "published by:         %s (host %s, pid %d, worker %s, fleet %s), trigger %s, actor %s, at %s\n",
			by.ID, orDash(by.Host), by.PID, orDash(by.Worker), orDash(by.Fleet), orDash(string(pub.Trigger)), orDash(pub.Actor), pub.At.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "workers:              %d\n", len(rows))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tPID\tHOST\tAPPLIED\tDIGEST\tSTATE\tLAST ERROR\tDRIFT")
	for _, r := range rows {
		fmt.Fprint(tw, termtext.Clean(fmt.Sprintf("  %s\t%d\t%s\t%d\t%s\t%s\t%s\t%t\n", r.ID, r.PID, r.Host, r.AppliedVersion, shortDigest(r.AppliedDigest), r.State, orDash(string(r.LastError)), r.BootstrapDrift)))
	}
	var gone []propagate.HostRow
	_ = json.Unmarshal(raw("unreachable_hosts"), &gone)
	for _, h := range gone {
		// A host whose leases lapsed: its workers' rows are gone, its
		// last version is remembered.
		fmt.Fprint(tw, termtext.Clean(fmt.Sprintf("  -\t-\t%s\t%d\t-\t%s\tlease lapsed, last seen %s\t-\n", h.Host, h.LastVersion, propagate.HostUnreachable, h.LastSeen.Format(time.RFC3339))))
	}
	_ = tw.Flush()
}

// shortDigest is an applied digest as the status table shows it: 12 hex
// digits tell rows at one version apart at a glance (the JSON answer has
// all 32); "-" for a worker too old to report one.
func shortDigest(d string) string {
	return orDash(d[:min(len(d), 12)])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
