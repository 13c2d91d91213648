package lifecycle

import (
	"log/slog"
	"os"

	"github.com/reconfhq/reconf/internal/sighold"
)

// A SIGHUP is a reload the operator asked of the service. A successor
// holds the ones that arrive during its start-up (sighold) and replays
// them once it serves; one that exits without having served (stopped, its
// start failed, its predecessor ended first) would otherwise drop them,
// while its predecessor serves on a file the operator meant to be
// reloaded. So it says "reload" on the hand-over line, and the
// predecessor, once back to serving (Handover.abort), sends itself the
// SIGHUP, which takes the same path as the operator's (one attempt, or
// busy). A predecessor that serves no more cannot be told: the successor
// logs the reload as dropped, with ReasonReloadDropped.

// ReasonReloadDropped is the stable reason a process logs when it exits
// without having served and cannot hand on a SIGHUP it held: no process
// reloads for it.
const ReasonReloadDropped = "restart_reload_dropped"

// HandOnReload is called by a process that exits without having served
// while it holds a SIGHUP: it tells its predecessor, which reloads once it
// serves on, or logs the reload as dropped when there is none to tell.
// A process that no predecessor started has no one to hand it to, nor
// a service that serves without it: it drops it quietly.
func HandOnReload(log *slog.Logger) {
	if predecessor == nil {
		return
	}
	if err := predecessor.say(wordReload); err != nil {
		msg := "a SIGHUP arrived before this process served and is dropped: no process reloads for it; send SIGHUP to the process that serves"
		if orphaned() {
			// The kernel sends SIGHUP (and SIGCONT) to a stopped process
			// whose process group its parent's end orphaned: the
			// operator may have sent none.
			msg += kernelHUPNote
		}
		log.Warn(msg, "reason", ReasonReloadDropped, "error", err)
		return
	}
	log.Info("a SIGHUP arrived before this process served; the previous process, which serves on, reloads for it")
}

// reloadHandedOn sends this process the SIGHUP a successor that did not
// serve handed on (Handover.abort reported it).
func reloadHandedOn(log *slog.Logger, pid int) {
	log.Info("restart: the new process held a SIGHUP when it exited without serving; reloading for it", "new_pid", pid)
	if err := sighold.Raise(); err != nil {
		log.Warn("the SIGHUP the new process held could not be replayed; send it again", "reason", ReasonReloadDropped, "error", err)
	}
}

// kernelHUPNote ends the dropped reload's line in a process whose parent
// ended.
const kernelHUPNote = "; the process that started this one ended, so the SIGHUP may be the kernel's to a stopped process, and then none was lost"

// orphaned reports whether the predecessor that started this process is
// no longer its parent: it ended, and this process was given to another.
func orphaned() bool { return goAhead != nil && goAhead.from > 0 && os.Getppid() != goAhead.from }
