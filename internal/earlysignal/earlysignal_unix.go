//go:build unix

package earlysignal

import (
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

var (
	caught = make(chan os.Signal, 8)
	once   sync.Once
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		catch()
	}
}

// catch starts holding the signals; init calls it for `serve`.
func catch() {
	signal.Notify(caught, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
}

// Handoff stops holding the signals and sends each kind caught meanwhile
// to the process once more, for the handlers it now has. Call it once
// those are registered (signal.Notify): a signal is then never taken by
// the default action in between. Only the first call does anything.
func Handoff() {
	once.Do(func() {
		signal.Stop(caught)
		var seen []os.Signal
		for {
			select {
			case s := <-caught:
				if !slices.Contains(seen, s) {
					seen = append(seen, s)
				}
				continue
			default:
			}
			break
		}
		for _, s := range seen {
			_ = syscall.Kill(os.Getpid(), s.(syscall.Signal))
		}
	})
}
