//go:build unix

package etcdproc

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// ProfileTo makes members started from now on write a CPU profile to
// path between StartProfile and StopProfile: a benchmark profiles the
// member over its measured window alone, as it profiles itself.
func ProfileTo(path string) error { return os.Setenv(profileEnv, path) }

// StartProfile asks the member to start its CPU profile (see ProfileTo).
func (p *Process) StartProfile() error { return p.cmd.Process.Signal(syscall.SIGUSR1) }

// StopProfile asks the member to stop its CPU profile and write it out.
func (p *Process) StopProfile() error { return p.cmd.Process.Signal(syscall.SIGUSR2) }

// profileOnSignal profiles the member between SIGUSR1 and SIGUSR2 into
// path (nothing without a path); the returned function stops a profile
// still running at exit.
func profileOnSignal(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	c := make(chan os.Signal, 2)
	signal.Notify(c, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var f *os.File
		end := func() {
			if f != nil {
				pprof.StopCPUProfile()
				f.Close()
				f = nil
			}
		}
		defer end()
		for {
			select {
			case <-done:
				return
			case s := <-c:
				if s == syscall.SIGUSR2 {
					end()
					continue
				}
				if f != nil {
					continue
				}
				var err error
				if f, err = os.Create(path); err != nil {
					fmt.Fprintln(os.Stderr, "etcdproc: profile:", err)
					continue
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintln(os.Stderr, "etcdproc: profile:", err)
					f.Close()
					f = nil
				}
			}
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
		<-exited
	}
}
