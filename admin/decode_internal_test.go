package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeReloadRequest checks the reload body decoder against an
// independent oracle built on encoding/json: a body is accepted exactly when
// it is empty (after JSON whitespace) or one JSON object with no member.
func FuzzDecodeReloadRequest(f *testing.F) {
	for _, s := range []string{
		"", " ", "{}", " { } ", "\t{\r\n}\n", "{ }x", "{}{}", "{{}}", `{"a":{}}`, `{"path":"/etc"}`,
		`{"":0}`, "[]", "null", "0", `"{}"`, "{", "}", "\ufeff{}", "{\v}", "{\u00a0}", `{"a":1,"a":2}`,
		`{"config":null}`, "{/**/}", "{\x00}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := decodeReloadRequest(body)
		trimmed := bytes.Trim(body, " \t\r\n")
		var m map[string]json.RawMessage
		isObject := len(trimmed) > 0 && trimmed[0] == '{' && json.Unmarshal(body, &m) == nil
		wantOK := len(trimmed) == 0 || (isObject && len(m) == 0)
		switch {
		case wantOK && err != nil:
			t.Fatalf("%q refused (%v), want accepted", body, err)
		case !wantOK && err == nil:
			t.Fatalf("%q accepted, want refused", body)
		case isObject && len(m) > 0 && !errors.Is(err, errBodyRejected):
			t.Fatalf("%q: %v, want errBodyRejected", body, err)
		case !wantOK && !isObject && !errors.Is(err, errBodyMalformed):
			t.Fatalf("%q: %v, want errBodyMalformed", body, err)
		}
	})
}
