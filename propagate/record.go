package propagate

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
)

// RecordFormat is the format version of the records this package writes.
// Format 1 (records with no "format" field) named its publisher by ID
// only; format 2 adds the publisher's identity, the trigger and the actor.
// A worker reads every format up to its own and refuses a newer one
// (record_format_unsupported) rather than guess at fields it does not know,
// so that during a rolling upgrade an old worker keeps its generation
// whole instead of applying half of a newer record.
const RecordFormat = 2

// Publisher says which worker published a record.
type Publisher struct {
	// ID is the publisher's row ID (see WorkerRow); a record is applied
	// only if this row was present when the record was written.
	ID   string `json:"id"`
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// Worker is the publisher's slot in its supervisor's fleet ("1" to
	// "N"), empty for a process that is its host's only worker.
	Worker string `json:"worker,omitempty"`
	// Fleet is the ID of the publisher's supervisor (one per
	// `serve --workers N`), empty when it has none.
	Fleet string `json:"fleet,omitempty"`
}

// Provenance is who published a version, when and why. Nothing in it is
// secret.
type Provenance struct {
	Version   uint64         `json:"version"`
	Format    int            `json:"format"`
	Publisher Publisher      `json:"publisher"`
	Trigger   reconf.Trigger `json:"trigger,omitempty"`
	Actor     string         `json:"actor,omitempty"`
	At        time.Time      `json:"published_at"`
}

// Update is one version of the cluster's configuration as the channel
// holds it.
type Update struct {
	// Version is the cluster version: the etcd key's own version counter,
	// dense and totally ordered. 0 means the channel is empty.
	Version uint64
	// Revision is the etcd revision that wrote it.
	Revision int64
	// PublishedBy is the publishing worker's ID.
	PublishedBy string
	// PublishedAt is the publisher's clock when it wrote the version.
	PublishedAt time.Time
	// Provenance is the record's envelope: format, publisher, trigger,
	// actor.
	Provenance Provenance
	// Record is what the runtime applies.
	Record fleet.Record

	// Rollout is the rollout state written with the record: set on a
	// staged candidate (the rollout's first state) and on a rollback's
	// record (its last), nil on any other.
	Rollout *reconf.RolloutState

	witnessed bool // the witness came with it (see witness.go): vetted without a read
}

// wire is the JSON stored under the config key. Live is text, not base64,
// so that what etcd holds is readable (and a test can search it for a
// secret canary): the runtime encodes live fields as canonical JSON
// (live_format "json/1") or, from older publishers, YAML (no
// live_format); both are UTF-8. Keeping JSON in a string rather than an
// object lets a follower that predates live_format still read the record
// and decode the JSON as YAML.
type wire struct {
	Format      int               `json:"format,omitempty"`
	Version     uint64            `json:"version"`
	PublishedBy string            `json:"published_by"`
	Publisher   *Publisher        `json:"publisher,omitempty"`
	Trigger     reconf.Trigger    `json:"trigger,omitempty"`
	Actor       string            `json:"actor,omitempty"`
	PublishedAt time.Time         `json:"published_at"`
	Fingerprint string            `json:"bootstrap_fingerprint"`
	Live        string            `json:"live"`
	LiveFormat  string            `json:"live_format,omitempty"`
	Files       map[string]string `json:"files,omitempty"`
	// RolledBack is fleet.Record.RolledBack.
	RolledBack string `json:"rolled_back_digest,omitempty"`
	// Rollout is the rollout state written with a candidate's record or
	// a rollback's: a follower applies the first beside its active
	// generation instead of in its place.
	Rollout *reconf.RolloutState `json:"rollout,omitempty"`
}

func encodeRecord(version uint64, by Publisher, at time.Time, rec fleet.Record) (string, error) {
	return encodeRecordWith(version, by, at, rec, nil)
}

// encodeRecordWith encodes a record written with rollout state st.
func encodeRecordWith(version uint64, by Publisher, at time.Time, rec fleet.Record, st *reconf.RolloutState) (string, error) {
	if !utf8.Valid(rec.Live) {
		return "", fmt.Errorf("propagate: the record's live fields are not UTF-8 text")
	}
	b, err := json.Marshal(wire{
		Format: RecordFormat, Version: version, PublishedBy: by.ID, Publisher: &by,
		Trigger: reconf.Trigger(rec.Trigger), Actor: rec.Actor, PublishedAt: at.UTC(),
		Fingerprint: rec.Fingerprint, Live: string(rec.Live), LiveFormat: rec.Format, Files: rec.Files, RolledBack: rec.RolledBack, Rollout: st,
	})
	return string(b), err
}

// decodeKV turns the config key into an Update. The version is the key's
// own counter; the record's copy must agree with it. A record of a newer
// format than RecordFormat is an error wrapping ErrFormat.
func decodeKV(kv *mvccpb.KeyValue) (Update, error) {
	var w wire
	if err := json.Unmarshal(kv.Value, &w); err != nil {
		return Update{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if w.Format == 0 {
		w.Format = 1
	}
	v := uint64(kv.Version)
	switch {
	case w.Format > RecordFormat:
		return Update{}, fmt.Errorf("%w: version %d is a format %d record; this worker reads formats up to %d", ErrFormat, v, w.Format, RecordFormat)
	case w.Version != v:
		return Update{}, fmt.Errorf("%w: record says version %d, the key is at %d (was it written by hand, or deleted?)", ErrMalformed, w.Version, v)
	case w.PublishedBy == "" || strings.Contains(w.PublishedBy, "/") || (w.Publisher != nil && w.Publisher.ID != w.PublishedBy):
		return Update{}, fmt.Errorf("%w: version %d names no valid publisher, or two", ErrMalformed, v)
	}
	p := Provenance{Version: v, Format: w.Format, Publisher: Publisher{ID: w.PublishedBy}, Trigger: w.Trigger, Actor: w.Actor, At: w.PublishedAt}
	if w.Publisher != nil {
		p.Publisher = *w.Publisher
	}
	return Update{
		Version: v, Revision: kv.ModRevision, PublishedBy: w.PublishedBy, PublishedAt: w.PublishedAt, Provenance: p,
		Record:  fleet.Record{Live: []byte(w.Live), Format: w.LiveFormat, Fingerprint: w.Fingerprint, Files: w.Files, Trigger: string(w.Trigger), Actor: w.Actor, RolledBack: w.RolledBack},
		Rollout: w.Rollout,
	}, nil
}
