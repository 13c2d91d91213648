// Command reconfd is an OpenAI-compatible LLM gateway that reloads its
// configuration transactionally, without dropping a request.
//
//	reconfd serve --config examples/local-stub.yaml
//	reconfd check-config --config new.yaml --against running.yaml
//	reconfd reload --address 127.0.0.1:9090
//	reconfd restart --address 127.0.0.1:9090
//	reconfd status --address 127.0.0.1:9090 --output json
//	reconfd history --limit 20
//	reconfd version
//
// See docs/reconfd.md for the commands, the configuration reference and
// the operator workflow. The command is a thin shell over
// internal/gateway.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf/handoff"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/redact"
	"github.com/reconfhq/reconf/internal/termtext"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// env is how the command reads its environment (os.LookupEnv, or a map in
// tests).
type env func(string) (string, bool)

func (e env) get(name string) string {
	v, _ := e(name)
	return v
}

// run executes the command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookup env) int {
	root := newRoot(stdout, stderr, lookup)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitcode.OK
	}
	// Every message printed here may quote a flag's value: a URL's
	// password goes, however malformed the URL (see internal/redact).
	red := redact.New(append(args, lookup.get(lifecycle.EnvFleetChannel))...)
	var ee *exitcode.Error
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			msg := termtext.Clean(red.String(ee.Msg))
			fmt.Fprintln(stderr, "reconfd:", msg)
			// A process a restart started, failing before it was ready,
			// tells its parent why: the restart's result then names
			// the cause. Elsewhere (no readiness pipe), or once ready,
			// this writes nothing.
			_ = handoff.Failed(msg)
		}
		if ee.Code == exitcode.Usage {
			fmt.Fprintln(stderr, "Run 'reconfd --help' for usage.")
		}
		return ee.Code
	}
	// Anything else comes from cobra itself: an unknown command or flag, a
	// missing required flag, wrong arguments (an upgrade whose executable
	// no longer has the command a restart runs: told to the parent too).
	msg := termtext.Clean(red.String(err.Error()))
	fmt.Fprintln(stderr, "reconfd:", msg)
	_ = handoff.Failed(msg)
	fmt.Fprintln(stderr, "Run 'reconfd --help' for usage.")
	return exitcode.Usage
}

func newRoot(stdout, stderr io.Writer, lookup env) *cobra.Command {
	root := &cobra.Command{
		Use:   "reconfd",
		Short: "An OpenAI-compatible LLM gateway with transactional configuration reload",
		Long: `reconfd routes OpenAI-compatible chat completion requests to backends (a
built-in stub, or any OpenAI-compatible server) and reloads its routing,
backends, aliases, limits and client keys transactionally: a reload either
publishes a whole new generation or changes nothing, and every request
finishes on the generation it started with.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitcode.Error{Code: exitcode.Usage, Msg: err.Error()}
	})
	// What the commands print may come from a server (or a file name):
	// it reaches the terminal through termtext, escapes shown, never
	// acted on. serve's log stream stays the process's own.
	out := termtext.NewWriter(stdout)
	root.AddCommand(
		newServeCmd(stderr, lookup),
		newCheckCmd(out, lookup),
		newReloadCmd(out, lookup),
		newRolloutCmd(out, lookup),
		newRollbackCmd(out, lookup),
		newRestartCmd(out, lookup),
		newStatusCmd(out, lookup),
		newWaitCmd(out, lookup),
		newHistoryCmd(out, lookup),
		newVersionCmd(out),
		newSchemaCmd(stdout), // the project's own text, not a server's
	)
	return root
}

// outputFlag checks an --output value.
func outputFlag(v string) error {
	if v != "text" && v != "json" {
		return exitcode.Usagef("--output must be text or json")
	}
	return nil
}
