//go:build !unix

package lifecycle

import (
	"os"
	"os/exec"

	"github.com/reconfhq/reconf/handoff"
)

// Workers cannot be started here (see handoff.Supported); these keep the
// package building.

func ownProcessGroup(*exec.Cmd) {}

func parentPipe() bool { return false }

func takePipe(int) bool { return false }

func takeReadPipe(int) bool { return false }

// socketPair is not available: a supervisor hand-over needs a Unix system.
func socketPair(string) (a, b *os.File, err error) { return nil, nil, handoff.ErrUnsupported }

func readerGone(*os.File) bool { return false }

// readWaiting is not needed: there is no hand-over, so no go-ahead or
// hand-over line.
func readWaiting(*os.File) string { return "" }

func processExists(int) bool { return false }
