package reconf

import (
	"context"
	"fmt"
)

// DefaultMaxSourceBytes bounds how much a source may return (2 MiB).
const DefaultMaxSourceBytes = 2 << 20

// Source is where candidates are read from. Read is called once per attempt
// (and once at construction) by one goroutine at a time.
//
// A Source returns an *Error with a source_* reason when the source cannot
// be trusted; any other error is reported as internal-failed.
type Source interface {
	// Read returns the source's current bytes, at most req.MaxBytes of them.
	Read(ctx context.Context, req ReadRequest) (Snapshot, error)
	// Describe names the source for status and logs, e.g. its absolute path.
	Describe() string
}

// ReadRequest is what the runtime tells a Source on each read.
type ReadRequest struct {
	// MaxBytes is the size bound; a larger source is source_oversize.
	MaxBytes int64
	// Last is the Snapshot.Version of the last read this runtime accepted
	// (nil at construction), whether or not the candidate it held was then
	// published: a file that failed validation and is then rewritten in
	// place is still a rewrite in place. A source uses it to tell an atomic
	// replacement from an in-place rewrite. A read the source refused does
	// not move it, so an unchanged file that failed fails again the same
	// way.
	Last any
}

// Snapshot is one read of a Source.
type Snapshot struct {
	Data []byte
	// Version identifies what was read. It is opaque to the runtime, which
	// keeps the last one and hands it back in the next ReadRequest. It must never be exposed: it may hold a digest.
	Version any
	// Revisions names, for each atomic-writer mount the read went through
	// (a Kubernetes ConfigMap, Secret or projected volume), the revision
	// directory its ..data link named: mount directory -> revision name.
	// The attempt reads every file the configuration references under
	// the same mount from that revision, so one generation never mixes
	// two. Revision names are shown in results, history and status.
	Revisions map[string]string
	// Warnings are what the operator should fix about the source although
	// the read succeeded (a file Kubernetes will never update, say). The
	// runtime logs them at start and shows the last read's in Status.
	Warnings []Warning
}

// Warning is a problem of a source that does not stop a read: a stable
// reason and a safe message saying what to do.
type Warning struct {
	Reason  Reason `json:"reason"`
	Message string `json:"message"`
}

// Bytes returns a Source that always yields data. It is meant for tests,
// examples and configuration built in code.
func Bytes(name string, data []byte) Source { return &bytesSource{name: name, data: data} }

type bytesSource struct {
	name string
	data []byte
}

func (s *bytesSource) Read(_ context.Context, req ReadRequest) (Snapshot, error) {
	if req.MaxBytes > 0 && int64(len(s.data)) > req.MaxBytes {
		return Snapshot{}, Errorf(ReasonSourceOversize, "source is %d bytes, over the %d byte bound", len(s.data), req.MaxBytes)
	}
	return Snapshot{Data: s.data}, nil
}

func (s *bytesSource) Describe() string { return fmt.Sprintf("bytes:%s", s.name) }

// SourceFunc adapts a function to Source. It is meant for tests and for
// sources kept in memory; Describe returns name.
func SourceFunc(name string, read func(ctx context.Context, req ReadRequest) (Snapshot, error)) Source {
	return &funcSource{name: name, read: read}
}

type funcSource struct {
	name string
	read func(context.Context, ReadRequest) (Snapshot, error)
}

func (s *funcSource) Read(ctx context.Context, req ReadRequest) (Snapshot, error) {
	return s.read(ctx, req)
}

func (s *funcSource) Describe() string { return s.name }
