// Package restartopt carries the runtime options that only a process
// replacing another (reconfd's restart and its fleet start) uses, so that
// the library's API does not hold them. Package reconf sets Option when
// it is initialized; a caller converts its result to a reconf.Option.
package restartopt

// Restart is a process's restart plumbing for reconf.New.
type Restart struct {
	// FirstGeneration numbers the startup load instead of 1, so that a
	// successor continues its predecessor's numbering (the predecessor's
	// active generation plus one). Zero means 1. A runtime with a channel
	// takes the cluster's version instead.
	FirstGeneration uint64
	// StartupPublish is for the first process of a restart, which
	// publishes its file with a Reload right after New: when the
	// cluster's current version is invalid here (its new restart-class
	// values may make the fleet's live part invalid), New starts on the
	// local file instead, numbered as that version, until the first
	// Reload publishes it over that version, even when the file is
	// unchanged. A version that runs here is joined as without it.
	StartupPublish bool
	// Values, a func(*T) for the runtime's configuration type T, sets the
	// restart-class fields the process runs on when they differ from the
	// file that waits for an explicit restart. It runs after the file,
	// the environment and overrides, on the startup load and on every
	// cluster version the runtime applies, never on a reload of the file.
	// It may set restart-class fields only.
	Values any
}

// Option returns the reconf.Option (as any: this package cannot name the
// type) that gives New r. Set by package reconf.
var Option func(r Restart) any
