package gateway

import (
	"crypto/sha256"
	"testing"
)

// TestMayBeAuthorized: the cheap test before a body is read lets every key
// through and refuses what authorized refuses (a wrong key, a prefix of a
// key, another scheme, no token).
func TestMayBeAuthorized(t *testing.T) {
	st := &routes{}
	for _, k := range []string{"key-alpha-0001", "key-beta-0002"} {
		st.keys = append(st.keys, sha256.Sum256([]byte(k)))
		st.keyTags = append(st.keyTags, keyTag([]byte(k)))
	}
	for _, tc := range []struct {
		header string
		ok     bool
	}{
		{"Bearer key-alpha-0001", true},
		{"bearer key-beta-0002", true},
		{"Bearer  key-beta-0002 ", true},
		{"Bearer key-gamma-0003", false},
		{"Bearer key-alpha", false},
		{"Basic a2V5LWFscGhhLTAwMDE=", false},
		{"Bearer ", false},
		{"", false},
	} {
		if got := st.mayBeAuthorized([]byte(tc.header)); got != tc.ok {
			t.Errorf("mayBeAuthorized(%q) = %v, want %v", tc.header, got, tc.ok)
		}
		if got := st.authorized([]byte(tc.header)); got != tc.ok {
			t.Errorf("authorized(%q) = %v, want %v", tc.header, got, tc.ok)
		}
	}
}
