// Package exitcode holds the exit codes of reconfd's commands and the
// error that carries one from a command's body up to main, which prints
// its message and exits with its code.
package exitcode

import "fmt"

// The exit codes every command shares; a command may add its own above
// Usage (wait does).
const (
	OK      = 0
	Failure = 1 // invalid configuration, failed outcome, unreachable API
	Usage   = 2 // bad flags or arguments
)

// The exit codes of reconfd wait beyond OK (converged), Failure (the
// status could not be read) and Usage.
const (
	WaitTimeout    = 3 // the deadline passed; the lagging workers are named
	WaitRolledBack = 4 // the generation was rolled back
	WaitSuperseded = 5 // a newer generation replaced it before every worker served it
)

// Error carries an exit code. Its message, when not empty, is printed by
// main; an empty one means the explanation was already printed.
type Error struct {
	Code int
	Msg  string
}

// Error returns the message.
func (e *Error) Error() string { return e.Msg }

// Fail is an exit code 1 error with a message.
func Fail(format string, args ...any) error {
	return &Error{Code: Failure, Msg: fmt.Sprintf(format, args...)}
}

// Usagef is an exit code 2 error with a message.
func Usagef(format string, args ...any) error {
	return &Error{Code: Usage, Msg: fmt.Sprintf(format, args...)}
}

// Failed is an exit code 1 whose explanation was already printed.
var Failed = &Error{Code: Failure}
