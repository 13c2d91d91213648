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

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/restartapi"
)

func newRestartCmd(stdout io.Writer, lookup env) *cobra.Command {
	var f clientFlags
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "restart [--address ADDR] [--token TOKEN] [--wait 60s] [--output json]",
		Short: "Replace a running reconfd's processes without dropping a request",
		Long: `Ask a running reconfd to restart through the management API (POST
/admin/config/restart): it checks the configuration file like a reload (a
refusal other than restart-required ends the restart with that outcome and
changes nothing), then replaces its serving processes with new ones started
from the executable on disk (a new binary at that path is an upgrade) and
the file's current content, keeping the listening sockets open: every
request is answered, every stream finishes on its generation. A new process
that does not become ready stops the restart; the old ones keep serving.

It waits up to --wait for the result, then follows the restart until it
ends or --timeout passes. SIGHUP and reload never restart.

Exit status: 0 when restarted, 1 for any other outcome or when the API
cannot be reached, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := f.resolve(lookup)
			if err != nil {
				return err
			}
			if wait <= 0 {
				return exitcode.Usagef("--wait must be positive")
			}
			if f.Timeout < wait+10*time.Second {
				f.Timeout = wait + 10*time.Second
			}
			status, body, err := f.Call(cmd.Context(), http.MethodPost, base+admin.RestartPath+"?wait="+url.QueryEscape(wait.String()), []byte("{}"))
			for err == nil && status == http.StatusAccepted {
				var res restartapi.Result
				if json.Unmarshal(body, &res) != nil || res.ID == "" {
					break
				}
				status, body, err = f.Call(cmd.Context(), http.MethodGet, base+admin.RestartPath+"/"+url.PathEscape(res.ID)+"?wait="+url.QueryEscape(wait.String()), nil)
			}
			if err != nil {
				return exitcode.Fail("%v", err)
			}
			var res restartapi.Result
			if json.Unmarshal(body, &res) != nil || res.Outcome == "" {
				return f.Refused(status, body)
			}
			if f.output == "json" {
				fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
			} else {
				printRestart(stdout, res)
			}
			if res.Outcome != restartapi.Restarted {
				return exitcode.Failed
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&wait, "wait", restartapi.DefaultWait, "how long each request waits for the restart to finish")
	return cmd
}

func printRestart(w io.Writer, r restartapi.Result) {
	fmt.Fprintf(w, "%s (%s): %s\n", r.Outcome, r.Reason, r.Message)
	fmt.Fprintf(w, "  id %s, generation %d -> %d, %.1f ms\n", r.ID, r.PreviousGeneration, r.Generation, r.DurationMS)
	if len(r.OldPIDs)+len(r.NewPIDs) > 0 {
		fmt.Fprintf(w, "  pids %v -> %v\n", r.OldPIDs, r.NewPIDs)
	}
	if r.Check != nil {
		printReload(w, *r.Check)
	}
}
