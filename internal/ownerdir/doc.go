// Package ownerdir keeps the owners of a private directory a process
// makes in a shared runtime directory (TMPDIR): the file owners names the
// pid of every process that has used it, one per line, the one that made
// it and each successor that took it over. A process removes its
// directory when it stops; one killed outright (SIGKILL, the OOM killer)
// leaves it behind. Sweep removes such leftovers: a directory is removed
// only when it is a private directory of this user, every pid it names
// is gone, no process holds the lock each owner takes on the owners file
// while it lives, and nothing answers on its socket, if it has one. The
// lock covers what a pid cannot: an owner in another pid namespace (a
// container sharing TMPDIR or a data directory, same kernel) names a pid
// that is nobody in the sweeper's. A successor
// names itself before its predecessor leaves, so a directory in the
// middle of a hand-over is never taken for a leftover; a pid the system
// has given to another process keeps a leftover, never loses a live
// directory. A directory without the file names nobody and stays.
package ownerdir
