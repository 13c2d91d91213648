package admin

import (
	"encoding/json"

	"github.com/reconfhq/reconf"
)

// ReloadResponse is the JSON answer to POST /admin/config/reload. It is
// built from a reconf.Result and, like it, never holds configuration
// content, a digest or a secret. The HTTP status is Outcome.HTTPStatus().
type ReloadResponse struct {
	Outcome            reconf.Outcome `json:"outcome"`
	Reason             reconf.Reason  `json:"reason"`
	Message            string         `json:"message"`
	PreviousGeneration uint64         `json:"previous_generation"`
	Generation         uint64         `json:"generation"`
	// RestartRequiredFields lists at most reconf.MaxListedPaths sorted
	// paths; it is an empty array, never null, when there are none.
	RestartRequiredFields     []string       `json:"restart_required_fields"`
	RestartRequiredFieldCount int            `json:"restart_required_field_count"`
	ChangedFieldCount         int            `json:"changed_field_count"`
	Trigger                   reconf.Trigger `json:"trigger"`
	DurationMS                float64        `json:"duration_ms"`
	// Problems locates each defect of an invalid candidate.
	Problems []Problem `json:"problems,omitempty"`
}

// Problem is one located defect of a candidate: a field path, line and
// column, and a safe detail that never quotes a value.
type Problem struct {
	Path   string `json:"path,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// NewReloadResponse returns the answer for res. It is a pure function.
func NewReloadResponse(res reconf.Result) ReloadResponse {
	out := ReloadResponse{
		Outcome:                   res.Outcome,
		Reason:                    res.Reason,
		Message:                   res.Message,
		PreviousGeneration:        res.PreviousGeneration,
		Generation:                res.Generation,
		RestartRequiredFields:     append([]string{}, res.RestartRequiredFields...),
		RestartRequiredFieldCount: res.RestartRequiredCount,
		ChangedFieldCount:         res.Changed,
		Trigger:                   res.Trigger,
		DurationMS:                float64(res.Duration.Microseconds()) / 1000,
	}
	for _, p := range res.Problems {
		out.Problems = append(out.Problems, Problem{p.Path, p.Line, p.Column, p.Detail})
	}
	return out
}

// StatusResponse is the JSON answer to GET /admin/config/status. It holds
// no content, digest or secret.
type StatusResponse struct {
	ActiveGeneration    uint64                 `json:"active_generation"`
	LastSuccess         *reconf.AttemptSummary `json:"last_success"`
	LastFailure         *reconf.AttemptSummary `json:"last_failure"`
	RetainedGenerations int                    `json:"retained_generations"`
	Pinned              int64                  `json:"pinned"`
	Busy                bool                   `json:"busy"`
	FixedSourcePath     string                 `json:"fixed_source_path"`
	Closed              bool                   `json:"closed,omitempty"`
	// Extra holds the fields added with WithStatusFields (for example
	// cluster_version, workers, converged). They are encoded beside the
	// fields above; a key that collides with one of them is dropped. When
	// decoding, Extra receives every key not named above, as
	// json.RawMessage values.
	Extra map[string]any `json:"-"`
}

// statusFields is StatusResponse without its methods, for encoding.
type statusFields StatusResponse

// NewStatusResponse returns the status document for st. It is a pure
// function.
func NewStatusResponse(st reconf.Status) StatusResponse {
	return StatusResponse{
		ActiveGeneration:    st.ActiveGeneration,
		LastSuccess:         st.LastSuccess,
		LastFailure:         st.LastFailure,
		RetainedGenerations: st.RetainedGenerations,
		Pinned:              st.Pinned,
		Busy:                st.Busy,
		FixedSourcePath:     st.Source,
		Closed:              st.Closed,
	}
}

// MarshalJSON encodes the fields and Extra in one object. It fails when an
// Extra value cannot be encoded.
func (s StatusResponse) MarshalJSON() ([]byte, error) {
	core, err := json.Marshal(statusFields(s))
	if err != nil || len(s.Extra) == 0 {
		return core, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(core, &doc); err != nil {
		return nil, err
	}
	for k, v := range s.Extra {
		if _, taken := doc[k]; taken || k == "closed" {
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

// UnmarshalJSON decodes the fields, and every other key into Extra.
func (s *StatusResponse) UnmarshalJSON(b []byte) error {
	var f statusFields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	for _, k := range []string{"active_generation", "last_success", "last_failure", "retained_generations", "pinned", "busy", "fixed_source_path", "closed"} {
		delete(doc, k)
	}
	*s = StatusResponse(f)
	if len(doc) > 0 {
		s.Extra = make(map[string]any, len(doc))
		for k, v := range doc {
			s.Extra[k] = v
		}
	}
	return nil
}
