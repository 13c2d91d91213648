// Package earlysignal catches the signals of `reconfd serve` (SIGTERM,
// SIGINT, SIGHUP) from the first milliseconds of the process, when its
// packages are initialized, until serve has its own handlers, and then
// hands over what it caught. Without it a signal that came in the ~20 ms
// before main took the default action: SIGTERM ended the process with
// status 143 instead of "stopped during start-up", and SIGHUP, which must
// never end reconfd, ended it too.
//
// Import it for its effect from the command's main package; it catches
// only when the command is `serve` (the first argument), so other commands
// and test binaries keep the default actions.
package earlysignal
