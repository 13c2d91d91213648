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
)
