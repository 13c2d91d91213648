package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/certfile"
	"github.com/reconfhq/reconf/internal/discovery"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/millis"
	"github.com/reconfhq/reconf/internal/termtext"
	"github.com/reconfhq/reconf/propagate"
)

// clientFlags are the management API client's flags.
type clientFlags struct {
	address, token, output string
	timeout                time.Duration
	// An https management listener: the CA that signed its certificate
	// (default: the system's roots) and, where it asks for one, this
	// client's certificate and key.
	caFile, certFile, keyFile string
	// ifMatch is the If-Match of a reload that expects exact content.
	ifMatch string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.address, "address", "", "management API address host:port or URL (default $"+admin.EnvAddress+", else the one reconfd serve of this user)")
	cmd.Flags().StringVar(&f.token, "token", "", "management bearer token (default $"+admin.EnvToken+", else the one reconfd serve generated)")
	cmd.Flags().StringVar(&f.output, "output", "text", "output format: text or json")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 90*time.Second, "how long to wait for the answer")
	cmd.Flags().StringVar(&f.caFile, "ca-file", "", "CA bundle (PEM) that signed an https management listener's certificate (default $"+envClientCA+", else the system's roots)")
	cmd.Flags().StringVar(&f.certFile, "cert", "", "client certificate (PEM) for a management listener that asks for one (default $"+envClientCert+")")
	cmd.Flags().StringVar(&f.keyFile, "key", "", "client certificate's key (PEM) (default $"+envClientKey+")")
}

// The CLI's environment for an https management listener.
const (
	envClientCA   = "RECONF_MANAGEMENT_CA_FILE"
	envClientCert = "RECONF_MANAGEMENT_CLIENT_CERT_FILE"
	envClientKey  = "RECONF_MANAGEMENT_CLIENT_KEY_FILE"
)

// resolve fills address and token from the environment and checks them.
func (f *clientFlags) resolve(lookup env) (string, error) {
	if err := outputFlag(f.output); err != nil {
		return "", err
	}
	if f.address == "" {
		f.address = strings.TrimSpace(lookup.get(admin.EnvAddress))
	}
	if f.token == "" {
		f.token = lookup.get(admin.EnvToken)
	}
	for p, name := range map[*string]string{&f.caFile: envClientCA, &f.certFile: envClientCert, &f.keyFile: envClientKey} {
		if *p == "" {
			*p = lookup.get(name)
		}
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return "", exitcode.Usagef("--cert and --key go together")
	}
	addr, token, err := discovery.Find(lookup, f.address, f.token)
	if err != nil {
		return "", err
	}
	f.address, f.token = addr, token
	base := f.address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return strings.TrimRight(base, "/"), nil
}

// call sends one management request and returns the status and body. It
// sends it once more, on a new connection, when the process that took it
// was handing over to a successor (409 handover_in_progress: the new
// connection reaches the process that serves), and, except for a
// restart, when the connection broke without an answer (the process that
// had it handed over and closed it).
func (f *clientFlags) call(ctx context.Context, method, url string, body []byte) (int, []byte, error) {
	status, b, err := f.callOnce(ctx, method, url, body)
	if retryable(method, url, status, b, err) && ctx.Err() == nil {
		return f.callOnce(ctx, method, url, body)
	}
	return status, b, err
}

// retryable reports whether an answer (or its absence) came from a
// process that no longer serves, so that the same request on a new
// connection reaches one that does.
func retryable(method, url string, status int, body []byte, err error) bool {
	if err != nil {
		restart := method == http.MethodPost && strings.Contains(url, admin.RestartPath)
		return !restart && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
	}
	if status != http.StatusConflict {
		return false
	}
	var e admin.ErrorBody
	return json.Unmarshal(body, &e) == nil && e.Error.Reason == admin.ReasonHandoverInProgress
}

// callOnce sends one management request on a new connection.
func (f *clientFlags) callOnce(ctx context.Context, method, url string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	if f.ifMatch != "" {
		req.Header.Set("If-Match", f.ifMatch)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if strings.HasPrefix(url, "https://") {
		if tr.TLSClientConfig, err = f.tlsConfig(ctx); err != nil {
			return 0, nil, err
		}
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("the management API cannot be reached: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the management API's answer: %w", err)
	}
	return resp.StatusCode, b, nil
}

// tlsConfig is the client's TLS: the CA bundle and client pair from
// their files, read with the bounded reader.
func (f *clientFlags) tlsConfig(ctx context.Context) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.caFile != "" {
		pool, err := certfile.ReadPool(ctx, f.caFile)
		if err != nil {
			return nil, fmt.Errorf("the CA file %w", err)
		}
		c.RootCAs = pool
	}
	if f.certFile != "" {
		pair, err := certfile.Read(ctx, f.certFile, f.keyFile, time.Now())
		if err != nil {
			return nil, fmt.Errorf("the client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{*pair}
	}
	return c, nil
}

// get reads one JSON document (what names it in errors) into v and
// returns its bytes; anything but 200 and JSON is an exit-1 error.
func (f *clientFlags) get(ctx context.Context, url, what string, v any) ([]byte, error) {
	status, body, err := f.call(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, exitcode.Fail("%v", err)
	}
	if status != http.StatusOK {
		return nil, f.refused(status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, exitcode.Fail("the management API's %s is not JSON: %v", what, err)
	}
	return body, nil
}

// refused explains an answer that is not a result: 401, 403, 400, 202...
// A 401 to a request sent without a token says how to give one: a server
// whose token was set (not generated) keeps it out of its discovery file.
func (f *clientFlags) refused(status int, body []byte) error {
	var hint string
	if status == http.StatusUnauthorized && f.token == "" {
		hint = "; no token was sent: pass --token or set " + admin.EnvToken
	}
	var e admin.ErrorBody
	if json.Unmarshal(body, &e) == nil && e.Error.Reason != "" {
		return exitcode.Fail("the management API answered %d %s: %s%s", status, e.Error.Reason, e.Error.Message, hint)
	}
	return exitcode.Fail("the management API answered %d %s%s", status, http.StatusText(status), hint)
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
			if f.ifMatch, err = x.ifMatch(); err != nil {
				return err
			}
			target := base + admin.ReloadPath
			if cmd.Flags().Changed("rollout") {
				target += "?rollout=" + url.QueryEscape(rollout)
			}
			status, body, err := x.retry(cmd.Context(), func() (int, []byte, error) {
				return f.call(cmd.Context(), http.MethodPost, target, []byte("{}"))
			})
			if err != nil {
				return exitcode.Fail("%v", err)
			}
			var res reconf.Result
			if json.Unmarshal(body, &res) != nil || res.Outcome == 0 {
				return f.refused(status, body)
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
			body, err := f.get(cmd.Context(), base+admin.StatusPath, "status", &st)
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
