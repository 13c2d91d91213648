package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
)

// Record is what travels between workers: a whole snapshot of the live
// fields, never a delta, so a worker that skipped versions just applies
// the newest. Secrets travel only as references (${env:NAME},
// ${file:/path}); a literal secret cannot be published. Nothing in a
// Record is secret.
type Record struct {
	// Live encodes every live field, as Format says.
	Live []byte `json:"live"`
	// Format names Live's encoding: "json/1" (canonical JSON), or "yaml"
	// (also the empty string) from a publisher that predates it or whose
	// configuration type holds values JSON cannot carry.
	Format string `json:"live_format,omitempty"`
	// Fingerprint is the publisher's bootstrap fingerprint.
	Fingerprint string `json:"bootstrap_fingerprint"`
	// Files maps the path of each `reconf:",file"` field to the SHA-256 of
	// the referenced file's content on the publisher, so a worker whose
	// copy differs refuses the version instead of running different
	// content under the same number. A `reconf:",hostfile"` field (a
	// listener's certificate) is not in it: each host holds its own file,
	// which a worker reads and validates itself when it applies a version.
	Files map[string]string `json:"files,omitempty"`
	// Trigger is what started the publishing attempt (a reconf.Trigger;
	// startup for a channel's first version). It is provenance only: a
	// worker that applies the record does not act on it.
	Trigger string `json:"trigger,omitempty"`
	// Actor names who asked for the publishing attempt (see
	// reconf.WithActor).
	Actor string `json:"actor,omitempty"`
	// RolledBack is, on the record of a rollback or a revert, the
	// content digest (Digest) that record took out of service. It rides
	// in the record so that every worker that applies the record, or
	// joins at it, refuses a reload of that content (invalid /
	// rolled_back_content), as the worker that decided does; a record
	// without it lifts the mark. It is not part of Digest.
	RolledBack string `json:"rolled_back_digest,omitempty"`
}

// Digest returns a short hex digest of what a worker applies from the
// record: its live fields (in their format) and the digests of the files
// they name; not the fingerprint, trigger or actor, which are about the
// publisher. It is what Member.Applied reports for a generation whose
// configuration makes this record. It is safe to show: the record holds
// secrets only as references.
func (r Record) Digest() string {
	h := sha256.New()
	h.Write([]byte(r.Format))
	h.Write([]byte{0})
	h.Write(r.Live)
	h.Write([]byte{0})
	for _, p := range slices.Sorted(maps.Keys(r.Files)) {
		h.Write([]byte(p + "\x00" + r.Files[p] + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
