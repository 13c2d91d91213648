package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/fieldclass"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/serve"
)

func newCheckCmd(stdout io.Writer, lookup env) *cobra.Command {
	var config, against, output string
	var classes bool
	var workers int
	var cluster []string
	var access serve.ClusterAccess
	cmd := &cobra.Command{
		Use:   "check-config --config PATH [--against PATH] [--output json]",
		Short: "Validate a configuration file without serving it",
		Long: `Compile a configuration file with the same compiler serve uses (strict
decode, secrets, validation, system prompt files), without listening or
publishing anything.

With --against BASELINE, compile the baseline too and print the classified
diff from the baseline to the file: the live paths a reload would apply and
the restart-required paths that would make it restart-required.

With --classes, print every configuration field with its class instead.

A file whose server section runs several workers or joins a cluster is also
checked as a cluster worker loads it: a literal secret is refused with
secret_not_propagatable, since only ${env:NAME} and ${file:/path}
references can travel between workers. --workers N (above 1) or --cluster
URLS check any file that way, as serve with those flags would load it.

The cluster's URLs (--cluster, else server.cluster) and its access
(--cluster-ca, --cluster-cert, --cluster-key, --cluster-user,
--cluster-password, --cluster-insecure and their RECONF_CLUSTER_*
variables) are checked as serve checks them: a URL serve refuses is
refused here too (a list mixing http:// and https:// with
cluster_endpoints_mixed_schemes), and a password is never printed.

check-config never connects to etcd: it checks the file and the flags
offline, where the cluster may be out of reach. What only the members can
answer (a TLS they refuse, cluster_tls_*; a user they refuse or that lacks
a grant, cluster_auth_*) shows when serve joins: it exits 1 at once with
"cannot join the cluster:" and the reason.

Exit status: 0 valid, 1 invalid, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFlag(output); err != nil {
				return err
			}
			if classes {
				return printClasses(stdout, output)
			}
			if config == "" {
				return exitcode.Usagef("check-config needs --config PATH")
			}
			if workers < 0 {
				return exitcode.Usagef("--workers must be at least 1")
			}
			if err := serve.CheckClusterURLs(cluster); err != nil {
				return err
			}
			opts := []gateway.Option{gateway.WithEnv(lookup)}
			if workers > 1 || len(cluster) > 0 {
				opts = append(opts, gateway.WithClusterCheck())
			}
			rep, err := gateway.Check(cmd.Context(), config, against, opts...)
			if err != nil {
				return exitcode.Fail("%v", err)
			}
			eps := cluster
			if len(eps) == 0 {
				eps = rep.ClusterEndpoints
			}
			if rep.Valid && len(eps) > 0 {
				// What serve checks after loading the file, before it
				// joins: TLS files, the password reference, plain http.
				if _, err := access.WithEnv(lookup).ClusterOptions(eps, lookup); err != nil {
					return exitcode.Fail("--cluster: %v", err)
				}
			}
			if output == "json" {
				b, _ := json.MarshalIndent(rep, "", "  ")
				fmt.Fprintln(stdout, string(b))
			} else {
				printReport(stdout, rep)
			}
			if !rep.Valid || (rep.Against != nil && !rep.Against.Valid) {
				return exitcode.Failed
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "configuration file to check (required)")
	cmd.Flags().StringVar(&against, "against", "", "baseline configuration (e.g. the running one) to diff against")
	cmd.Flags().StringVar(&output, "output", "text", "output format: text or json")
	cmd.Flags().BoolVar(&classes, "classes", false, "print every field's class and exit")
	cmd.Flags().IntVar(&workers, "workers", 0, "check as serve --workers N would load the file (above 1: as a cluster worker)")
	cmd.Flags().StringSliceVar(&cluster, "cluster", nil, "check as serve --cluster URLS would load the file (as a cluster worker)")
	registerClusterAccess(cmd.Flags(), &access)
	return cmd
}

func printReport(w io.Writer, rep *gateway.CheckReport) {
	printOne(w, "", rep)
	if rep.Against == nil {
		return
	}
	printOne(w, "against ", rep.Against)
	d := rep.Diff
	if d == nil {
		fmt.Fprintln(w, "no diff: both files must be valid")
		return
	}
	switch d.ReloadOutcome {
	case reconf.NoOp:
		fmt.Fprintln(w, "diff: no effective change; a reload would be a no-op")
		return
	case reconf.RestartRequired:
		fmt.Fprintln(w, "diff: a reload would be restart-required (restart the service to apply it)")
	default:
		fmt.Fprintln(w, "diff: a reload would publish a new generation")
	}
	list := func(title string, paths []string) {
		fmt.Fprintf(w, "  %s (%d):\n", title, len(paths))
		for _, p := range paths {
			fmt.Fprintf(w, "    %s\n", p)
		}
	}
	list("live", d.Live)
	list("restart-required", d.RestartRequired)
}

func printOne(w io.Writer, prefix string, rep *gateway.CheckReport) {
	mode := ""
	if rep.Cluster {
		mode = " (checked as a cluster worker)"
	}
	if rep.Valid {
		fmt.Fprintf(w, "%s%s: valid%s\n", prefix, rep.Config, mode)
		return
	}
	fmt.Fprintf(w, "%s%s: %s (%s)%s: %s\n", prefix, rep.Config, rep.Outcome, rep.Reason, mode, rep.Message)
	printProblems(w, rep.Problems, rep.ProblemCount)
}

func printClasses(w io.Writer, output string) error {
	fcs := fieldclass.Of(reflect.TypeFor[gateway.Config]())
	if output == "json" {
		type row struct {
			Path  string `json:"path"`
			Class string `json:"class"`
		}
		rows := make([]row, len(fcs))
		for i, fc := range fcs {
			rows[i] = row{fc.Path, fc.Class}
		}
		b, _ := json.MarshalIndent(rows, "", "  ")
		fmt.Fprintln(w, string(b))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tCLASS")
	for _, fc := range fcs {
		fmt.Fprintf(tw, "%s\t%s\n", fc.Path, strings.ToLower(fc.Class))
	}
	return tw.Flush()
}
