package admin

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/reconfhq/reconf"
)

// The answer to POST /admin/config/reload is a reconf.Result in its JSON
// form (reconf.Result.MarshalJSON), with the outcome's HTTP status: the
// library and the API share one wire type, so a client decodes an answer
// into a reconf.Result.

// StatusResponse is the JSON answer to GET /admin/config/status: a
// reconf.Status and the fields the service adds. It holds no content,
// digest or secret.
type StatusResponse struct {
	reconf.Status
	// Extra holds the fields added with WithStatusFields (for example
	// cluster_version, workers, converged). They are encoded beside the
	// Status fields; a key that collides with one of them is dropped. When
	// decoding, Extra receives every key reconf.Status does not name, as
	// json.RawMessage values.
	Extra map[string]any `json:"-"`
}

// statusKeys are the JSON keys of reconf.Status, which Extra cannot take.
var statusKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[reconf.Status]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}()

// newStatusResponse returns the status document for st. It is a pure
// function.
func newStatusResponse(st reconf.Status) StatusResponse {
	return StatusResponse{Status: st}
}

// MarshalJSON encodes the Status fields and Extra in one object. It fails
// when an Extra value cannot be encoded.
func (s StatusResponse) MarshalJSON() ([]byte, error) {
	core, err := json.Marshal(s.Status)
	if err != nil || len(s.Extra) == 0 {
		return core, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(core, &doc); err != nil {
		return nil, err
	}
	for k, v := range s.Extra {
		if statusKeys[k] {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		doc[k] = b
	}
	return json.Marshal(doc)
}

// UnmarshalJSON decodes the Status fields, and every other key into Extra.
func (s *StatusResponse) UnmarshalJSON(b []byte) error {
	var st reconf.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	*s = StatusResponse{Status: st}
	for k, v := range doc {
		if statusKeys[k] {
			continue
		}
		if s.Extra == nil {
			s.Extra = make(map[string]any, len(doc))
		}
		s.Extra[k] = v
	}
	return nil
}
