package propagate

import "errors"

// Sentinel errors.
var (
	// ErrMalformed is wrapped when the channel's key holds something that is
	// not a record this package wrote.
	ErrMalformed = errors.New("propagate: malformed record")
	// ErrUnreachable is wrapped when etcd did not answer in time.
	ErrUnreachable = errors.New("propagate: channel unreachable")
	// ErrFormat is wrapped when the channel holds a record of a newer
	// format than this worker reads (RecordFormat).
	ErrFormat = errors.New("propagate: record format not supported")
	// ErrUnknownPublisher is wrapped when a record's publisher had no
	// presence row in the channel when the record was written.
	ErrUnknownPublisher = errors.New("propagate: record from an unknown publisher")
)

// A Follower reports the reasons of the closed reconf.Reason set in its
// worker row: the runtime's own (secret_unresolved, file_digest_mismatch,
// ...) and those of a channel it cannot apply (channel_unreachable,
// record_malformed, record_format_unsupported, publisher_unknown,
// record_older), so a metric or a dashboard reads one vocabulary.
