package propagate

import (
	"errors"

	"github.com/reconfhq/reconf"
)

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

// Reasons a Follower reports in its worker row besides the runtime's own
// (reconf.Reason values such as secret_unresolved or file_digest_mismatch).
// They are stable like every reason.
const (
	// ReasonUnreachable: the last read of the channel failed; the worker
	// keeps serving its last-good generation.
	ReasonUnreachable reconf.Reason = "channel_unreachable"
	// ReasonMalformed: the channel's key holds a record this package cannot
	// decode; nothing is applied until a good version is published.
	ReasonMalformed reconf.Reason = "record_malformed"
	// ReasonFormatUnsupported: the channel holds a record of a newer format
	// than this worker reads (a newer reconfd published it during a roll);
	// the worker keeps its generation until it is replaced.
	ReasonFormatUnsupported reconf.Reason = "record_format_unsupported"
	// ReasonUnknownPublisher: the channel holds a record whose publisher
	// had no presence row under the channel's prefix when it was written:
	// something other than a worker of this fleet wrote it. It is refused.
	ReasonUnknownPublisher reconf.Reason = "publisher_unknown"
	// ReasonOlder: the channel's key went back to a version older than the
	// one this worker holds (it was deleted and written again); the worker
	// keeps its generation and never applies an older version.
	ReasonOlder reconf.Reason = "record_older"
)
