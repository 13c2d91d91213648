package gateway

import "testing"

// bearer takes the token of "Bearer TOKEN", the scheme in any case and
// the token trimmed of white space, Unicode's included.
func TestBearer(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer sk-1":        "sk-1",
		"bearer sk-1":        "sk-1",
		"BEARER  sk-1 ":      "sk-1",
		"Bearer sk-1\u00a0":  "sk-1",
		"Bearer \u00a0sk-1":  "sk-1",
		"Bearer é-key":       "é-key",
		"Basic dXNlcjpwYXNz": "",
		"Bearer":             "",
		"Bearersk-1":         "",
	} {
		tok, ok := bearer([]byte(h))
		if string(tok) != want || ok != (want != "") {
			t.Errorf("%q: got %q %v, want %q", h, tok, ok, want)
		}
	}
}
