//go:build !unix

package lifecycle

import "os/exec"

// Workers cannot be started here (see handoff.Supported); these keep the
// package building.

func ownProcessGroup(*exec.Cmd) {}

func parentPipe() bool { return false }
