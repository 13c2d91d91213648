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
	"github.com/reconfhq/reconf/internal/lifecycle"
	"github.com/reconfhq/reconf/internal/redact"
	"github.com/reconfhq/reconf/internal/termtext"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // invalid configuration, failed outcome, unreachable API
	exitUsage   = 2 // bad flags or arguments
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

// exitError carries an exit code; its message, when not empty, has already
// been printed or is printed by run.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(format string, args ...any) error {
	return &exitError{code: exitFailure, msg: fmt.Sprintf(format, args...)}
}

// failed is an exit code 1 whose explanation was already printed.
var failed = &exitError{code: exitFailure}

// run executes the command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookup env) int {
	root := newRoot(stdout, stderr, lookup)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	// Every message printed here may quote a flag's value: a URL's
	// password goes, however malformed the URL (see internal/redact).
	red := redact.New(append(args, lookup.get(lifecycle.EnvFleetChannel))...)
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			msg := termtext.Clean(red.String(ee.msg))
			fmt.Fprintln(stderr, "reconfd:", msg)
			// A process a restart started, failing before it was ready,
			// tells its parent why: the restart's result then names
			// the cause. Elsewhere (no readiness pipe), or once ready,
			// this writes nothing.
			_ = handoff.Failed(msg)
		}
		if ee.code == exitUsage {
			fmt.Fprintln(stderr, "Run 'reconfd --help' for usage.")
		}
		return ee.code
	}
	// Anything else comes from cobra itself: an unknown command or flag, a
	// missing required flag, wrong arguments (an upgrade whose executable
	// no longer has the command a restart runs: told to the parent too).
	msg := termtext.Clean(red.String(err.Error()))
	fmt.Fprintln(stderr, "reconfd:", msg)
	_ = handoff.Failed(msg)
	fmt.Fprintln(stderr, "Run 'reconfd --help' for usage.")
	return exitUsage
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
		return &exitError{code: exitUsage, msg: err.Error()}
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

// usage is an exit code 2 error.
func usage(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// outputFlag checks an --output value.
func outputFlag(v string) error {
	if v != "text" && v != "json" {
		return usage("--output must be text or json")
	}
	return nil
}
