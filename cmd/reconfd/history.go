package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/termtext"
	"github.com/reconfhq/reconf/propagate"
)

func newHistoryCmd(stdout io.Writer, lookup env) *cobra.Command {
	var (
		f     clientFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "history [--limit N] [--address ADDR] [--token TOKEN] [--output json]",
		Short: "Show a running reconfd's configuration history",
		Long: `Show the configuration attempts of a running reconfd, newest first, through
the management API (GET /admin/config/history): when, the trigger, who
(signal, api token or certificate, sdk, the publishing worker), the
outcome and reason, the generation before and after, the changed paths
(never values) or the paths that need a restart, and the duration. In a
fleet the history is the fleet's, from etcd: one entry per attempt, and
each published version shows how many workers applied it. The first
line says whether the fleet has converged.

Exit status: 0 when the history was read, 1 otherwise, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > admin.MaxHistoryEntries {
				return exitcode.Usagef("--limit must be between 1 and %d", admin.MaxHistoryEntries)
			}
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			var doc admin.HistoryResponse
			body, err := f.Get(cmd.Context(), base+admin.HistoryPath+"?limit="+strconv.Itoa(limit), "history", &doc)
			if err != nil {
				return err
			}
			if f.output == "json" {
				fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
				return nil
			}
			// The convergence line is a courtesy: a status that cannot be
			// read does not hide the history.
			var st admin.StatusResponse
			if _, err := f.Get(cmd.Context(), base+admin.StatusPath, "status", &st); err == nil {
				fmt.Fprintln(stdout, convergence(st))
			}
			printHistory(stdout, doc.Entries)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "how many entries, newest first")
	return cmd
}

// printHistory prints entries as an aligned table. The APPLIED column,
// for a fleet, counts the workers that applied a published version.
func printHistory(w io.Writer, es []reconf.HistoryEntry) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no attempts recorded")
		return
	}
	fleet := false
	for _, e := range es {
		fleet = fleet || e.Worker != ""
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "TIME\tTRIGGER\tACTOR\tOUTCOME\tREASON\tGENERATION\tCHANGED\tMS"
	if fleet {
		head = "TIME\tWORKER\tTRIGGER\tACTOR\tOUTCOME\tREASON\tGENERATION\tCHANGED\tAPPLIED\tMS"
	}
	fmt.Fprintln(tw, head)
	for _, e := range es {
		gen := strconv.FormatUint(e.Generation, 10)
		if e.Generation != e.PreviousGeneration && e.PreviousGeneration != 0 {
			gen = fmt.Sprintf("%d -> %d", e.PreviousGeneration, e.Generation)
		}
		cols := []string{e.Time.Local().Format(time.DateTime)}
		if fleet {
			cols = append(cols, dash(e.Worker))
		}
		cols = append(cols, string(e.Trigger), dash(e.Actor), e.Outcome, string(e.Reason), gen, changedPaths(e))
		if fleet {
			cols = append(cols, applied(e))
		}
		cols = append(cols, strconv.FormatFloat(e.DurationMS, 'f', 1, 64))
		for i := range cols {
			// Cleaned before the tabwriter measures them, so a row
			// with escapes keeps its alignment.
			cols[i] = termtext.Clean(cols[i])
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	_ = tw.Flush()
}

// changedPaths renders an entry's paths: the live paths that changed, or
// those that need a restart, a few of them and the count.
func changedPaths(e reconf.HistoryEntry) string {
	paths, n, prefix := e.ChangedFields, e.ChangedFieldCount, ""
	if e.RestartRequiredFieldCount > 0 {
		paths, n, prefix = e.RestartRequiredFields, e.RestartRequiredFieldCount, "restart: "
	}
	if n == 0 {
		return "-"
	}
	const shown = 3
	s := prefix + strings.Join(paths[:min(len(paths), shown)], ", ")
	if n > shown {
		s += fmt.Sprintf(" (+%d)", n-shown)
	}
	return s
}

// applied counts the workers that applied a published version, and names
// those that failed.
func applied(e reconf.HistoryEntry) string {
	if len(e.Applies) == 0 {
		return "-"
	}
	ok, failures := e.Applied()
	var failed []string
	for _, a := range failures {
		failed = append(failed, a.Worker+" "+string(a.Reason))
	}
	s := fmt.Sprintf("%d/%d", ok, len(e.Applies))
	if len(failed) > 0 {
		s += " failed: " + strings.Join(failed, ", ")
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// convergence is the first line of status and history: for a fleet,
// whether every worker runs the cluster version; for one process, its
// generation.
func convergence(st admin.StatusResponse) string {
	raw := func(k string) json.RawMessage {
		b, _ := st.Extra[k].(json.RawMessage)
		return b
	}
	if raw("cluster_version") == nil && raw("cluster_reachable") == nil {
		return fmt.Sprintf("SINGLE PROCESS at generation %d", st.ActiveGeneration)
	}
	var (
		version   *uint64
		reachable = true
		rows      []propagate.WorkerRow
	)
	_ = json.Unmarshal(raw("cluster_version"), &version)
	if b := raw("cluster_reachable"); b != nil {
		_ = json.Unmarshal(b, &reachable)
	}
	_ = json.Unmarshal(raw("workers"), &rows)
	if !reachable || version == nil {
		return "FLEET STATE UNKNOWN: etcd is unreachable from the answering worker"
	}
	at := 0
	var behind []string
	for _, r := range rows {
		if r.AppliedVersion == *version {
			at++
			continue
		}
		b := fmt.Sprintf("%s at %d", r.ID, r.AppliedVersion)
		if r.LastError != "" {
			b += " (" + string(r.LastError) + ")"
		}
		behind = append(behind, b)
	}
	var gone []propagate.HostRow
	_ = json.Unmarshal(raw("unreachable_hosts"), &gone)
	hosts := ""
	for i, h := range gone {
		if i == 0 {
			hosts = "; unreachable: "
		} else {
			hosts += ", "
		}
		hosts += fmt.Sprintf("host %s (last at version %d)", h.Host, h.LastVersion)
	}
	if len(rows) > 0 && at == len(rows) {
		return fmt.Sprintf("CONVERGED: all %d workers at version %d", len(rows), *version) + hosts
	}
	s := fmt.Sprintf("NOT CONVERGED: %d of %d workers at version %d", at, len(rows), *version)
	if len(behind) > 0 {
		s += "; " + strings.Join(behind, ", ")
	}
	return s + hosts
}

// generationLine is "generation G: a of b applied, c rejected (reasons)"
// for a cluster whose state the answering worker read, counted over the
// live workers' rows; "" otherwise.
func generationLine(st admin.StatusResponse) string {
	var (
		version *uint64
		rows    []propagate.WorkerRow
	)
	b, _ := st.Extra["cluster_version"].(json.RawMessage)
	if b == nil || json.Unmarshal(b, &version) != nil || version == nil {
		return ""
	}
	if b, _ := st.Extra["workers"].(json.RawMessage); b != nil {
		_ = json.Unmarshal(b, &rows)
	}
	return propagate.Summarize(*version, rows).String(*version)
}
