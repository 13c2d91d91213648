package gateway

import (
	"crypto/sha256"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestMayBeAuthorized: the cheap test before a body is read lets every key
// through and refuses what authorized refuses (a wrong key, a prefix of a
// key, another scheme, no token), for a key sent as a bearer token or as
// X-Api-Key.
func TestMayBeAuthorized(t *testing.T) {
	st := &routes{}
	for _, k := range []string{"key-alpha-0001", "key-beta-0002"} {
		st.keys = append(st.keys, sha256.Sum256([]byte(k)))
		st.keyTags = append(st.keyTags, keyTag([]byte(k)))
	}
	for _, tc := range []struct {
		auth, apiKey string
		ok           bool
	}{
		{"Bearer key-alpha-0001", "", true},
		{"bearer key-beta-0002", "", true},
		{"Bearer  key-beta-0002 ", "", true},
		{"Bearer key-gamma-0003", "", false},
		{"Bearer key-alpha", "", false},
		{"Basic a2V5LWFscGhhLTAwMDE=", "", false},
		{"Bearer ", "", false},
		{"", "", false},
		{"", "key-alpha-0001", true},
		{"", "key-alpha", false},
		{"", "Bearer key-alpha-0001", false},
		// An Authorization header decides, whatever X-Api-Key says.
		{"Basic a2V5LWFscGhhLTAwMDE=", "key-alpha-0001", false},
		{"Bearer key-gamma-0003", "key-alpha-0001", false},
		{"Bearer key-alpha-0001", "key-gamma-0003", true},
	} {
		var h fasthttp.RequestHeader
		if tc.auth != "" {
			h.Set("Authorization", tc.auth)
		}
		if tc.apiKey != "" {
			h.Set("x-api-key", tc.apiKey)
		}
		tok := authorization(&h)
		if got := st.mayBeAuthorized(tok); got != tc.ok {
			t.Errorf("mayBeAuthorized(Authorization %q, X-Api-Key %q) = %v, want %v", tc.auth, tc.apiKey, got, tc.ok)
		}
		if got := st.authorized(tok); got != tc.ok {
			t.Errorf("authorized(Authorization %q, X-Api-Key %q) = %v, want %v", tc.auth, tc.apiKey, got, tc.ok)
		}
	}
}
