package main

import (
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
	"github.com/reconfhq/reconf/internal/fleetstatus"
	"github.com/reconfhq/reconf/internal/termtext"
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
				fmt.Fprintln(stdout, fleetstatus.Convergence(st))
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
