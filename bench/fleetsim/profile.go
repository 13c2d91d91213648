//go:build linux

package main

import (
	"os"
	"runtime/pprof"
)

// startProfile starts a CPU profile of this process into path and returns
// the function that stops it and closes the file; with no path it does
// nothing.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
