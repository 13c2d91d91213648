//go:build !unix

package handoff

import (
	"net"
	"os"
	"os/exec"
)

// Supported is false: see the Unix build's documentation.
const Supported = false

// dup returns no file: the Set records the socket's name and address, so a
// single process serves as anywhere else, and Start, which would hand the
// socket on, returns ErrUnsupported.
func dup(string, net.Listener) (*os.File, error) { return nil, nil }

func checkListening(int) error { return ErrUnsupported }

// closeOnExecReady does nothing where there is no readiness pipe.
func closeOnExecReady() {}

// leadsGroup is false: there are no process groups to kill here.
func leadsGroup(*exec.Cmd) bool { return false }

func killGroup(int) {}
