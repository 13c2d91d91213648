package propagate

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/reconfhq/reconf"
)

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
	// Record is what the runtime applies.
	Record reconf.Record
}

// wire is the JSON stored under the config key. Live is text, not base64,
// so that what etcd holds is readable (and a test can search it for a
// secret canary): the runtime encodes live fields as canonical JSON
// (live_format "json/1") or, from older publishers, YAML (no
// live_format); both are UTF-8. Keeping JSON in a string rather than an
// object lets a follower that predates live_format still read the record
// and decode the JSON as YAML.
type wire struct {
	Version     uint64            `json:"version"`
	PublishedBy string            `json:"published_by"`
	PublishedAt time.Time         `json:"published_at"`
	Fingerprint string            `json:"bootstrap_fingerprint"`
	Live        string            `json:"live"`
	LiveFormat  string            `json:"live_format,omitempty"`
	Files       map[string]string `json:"files,omitempty"`
}

func encodeRecord(version uint64, by string, at time.Time, rec reconf.Record) (string, error) {
	if !utf8.Valid(rec.Live) {
		return "", fmt.Errorf("propagate: the record's live fields are not UTF-8 text")
	}
	b, err := json.Marshal(wire{
		Version: version, PublishedBy: by, PublishedAt: at.UTC(),
		Fingerprint: rec.Fingerprint, Live: string(rec.Live), LiveFormat: string(rec.Format), Files: rec.Files,
	})
	return string(b), err
}

// decodeKV turns the config key into an Update. The version is the key's
// own counter; the record's copy must agree with it.
func decodeKV(kv *mvccpb.KeyValue) (Update, error) {
	var w wire
	if err := json.Unmarshal(kv.Value, &w); err != nil {
		return Update{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	v := uint64(kv.Version)
	if w.Version != v {
		return Update{}, fmt.Errorf("%w: record says version %d, the key is at %d (was it written by hand, or deleted?)", ErrMalformed, w.Version, v)
	}
	return Update{
		Version: v, Revision: kv.ModRevision, PublishedBy: w.PublishedBy, PublishedAt: w.PublishedAt,
		Record: reconf.Record{Live: []byte(w.Live), Format: reconf.LiveFormat(w.LiveFormat), Fingerprint: w.Fingerprint, Files: w.Files},
	}, nil
}
