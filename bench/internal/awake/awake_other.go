//go:build !linux

package awake

import "errors"

// RunIfChild returns at once: no spinner is ever started here.
func RunIfChild() {}

// Start refuses: the spinners need Linux's SCHED_IDLE policy (a spinner at
// normal priority would take CPU time from the processes measured).
func Start() (stop func(), err error) {
	return nil, errors.New("awake: the idle-priority spinners need Linux (SCHED_IDLE)")
}
