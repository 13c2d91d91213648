// Package reasons holds the stable reasons that only a cluster channel
// or the checks of files a configuration references produce. They stay
// part of the contract: package reconf gives each its outcome and lists
// its string in reconf.Reasons, and an answer carries it as a
// reconf.Reason. They live here, not in the root's API, because a
// library user's code neither writes them nor branches on them; package
// propagate and reconfd do. The constants are untyped so that they are
// reconf.Reason values wherever one is expected. It also words the
// messages whose advice differs with who reads them (RolledBackMessage).
package reasons

// The reasons of the files a configuration references (a ${file:} secret
// or a file field).
const (
	// FileNotRegular: a referenced file is a FIFO, a device, a directory
	// or a pseudo file (/proc, /sys), after symlinks.
	FileNotRegular = "file_not_regular"
	// FileOversize: a referenced file is over the size bound.
	FileOversize = "file_oversize"
	// FileUnreadable: a referenced file exists but cannot be read.
	FileUnreadable = "file_unreadable"
	// FileWritable: a ${file:} secret's file (after symlinks) may be
	// written by its group or by others.
	FileWritable = "file_writable_by_others"
	// FileReadable: a ${file:} secret's file may be read by others (group
	// read is allowed).
	FileReadable = "file_readable_by_others"
	// FileOwner: a ${file:} secret's file belongs to neither the process's
	// user nor root.
	FileOwner = "file_foreign_owner"
)

// The reasons of a runtime that publishes to or applies from a cluster
// channel.
const (
	// Stale: a cluster version not newer than the one held.
	Stale = "stale_version"
	// Superseded: another worker published first (a publish's
	// compare-and-set lost), or a rollout's state moved on before this
	// worker's decision was written; busy.
	Superseded = "superseded"
	// DigestMismatch: a file a cluster version names differs here.
	DigestMismatch = "file_digest_mismatch"
	// SecretNotPropagate: a candidate holds a secret that a cluster record
	// cannot carry (a literal, which would be written to the channel).
	SecretNotPropagate = "secret_not_propagatable"
	// RecordTooLarge: the cluster record of a candidate is larger than the
	// cluster accepts in one request (etcd's --max-request-bytes).
	RecordTooLarge = "record_too_large"
	// ClusterUnavailable: the cluster channel could not be written.
	ClusterUnavailable = "cluster_unavailable"
)

// The reasons a worker following a cluster channel reports in its worker
// row (package propagate) when it cannot apply what the channel holds;
// the worker keeps serving its active generation meanwhile.
const (
	// ChannelUnreachable: the last read of the channel failed.
	ChannelUnreachable = "channel_unreachable"
	// RecordMalformed: the channel holds a record that cannot be decoded;
	// nothing is applied until a good version is published.
	RecordMalformed = "record_malformed"
	// RecordFormat: the channel holds a record of a newer format than this
	// binary reads (a newer one published it during a roll); the worker
	// must be replaced by the newer binary, hence restart-required.
	RecordFormat = "record_format_unsupported"
	// PublisherUnknown: the record's publisher had no presence row in the
	// channel when it was written: something other than a worker of the
	// fleet wrote it.
	PublisherUnknown = "publisher_unknown"
	// RecordOlder: the channel's key went back to a version older than the
	// one held (deleted and written again); an older version is never
	// applied.
	RecordOlder = "record_older"
)
