//go:build !unix

package main

import (
	"os"

	"github.com/reconfhq/reconf/handoff"
)

// socketPair is not available: a supervisor hand-over needs a Unix system.
func socketPair(string) (a, b *os.File, err error) { return nil, nil, handoff.ErrUnsupported }
