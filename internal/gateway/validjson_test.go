package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

var validJSONCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, "\t\n\r{}\r\n", `{`, `}`, `[`, `]`, `{]`, `[}`, `[1,]`, `[,1]`, `{"a":1,}`, `{"a"}`, `{"a":}`,
	`{"a" : 1 , "b":[true,false,null]}`, `{1:2}`, `{"a":1}{}`, `{} {}`, `"x"`, `"`, `"\"`, `"\u12"`, `"\u12G4"`, `"\u12aF"`,
	`"\x"`, `"\/\b\f\n\r\t\\\""`, "\"a\x1fb\"", "\"a\x7fb\"", "\"\xff\xfe\"", `0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`,
	`1E-7`, `-12.5e+10`, `1.5e3.2`, `tru`, `true`, `truex`, `nul`, `null`, `fals`, `false`, `[1 2]`, `[1, 2]`, `{"a":{"b":[{}]}}`,
	`[[[]]]`, `[[[]]`, `NaN`, `Infinity`, `+1`, `[-]`, `{"a":1 "b":2}`, "{\"a\":\x00}", `[1]x`, `{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`,
	// Objects and arrays nested across shallowJSONDepth, closed right
	// and crossed.
	strings.Repeat(`{"a":[`, shallowJSONDepth) + "1" + strings.Repeat("]}", shallowJSONDepth),
	strings.Repeat(`{"a":[`, shallowJSONDepth) + "1" + strings.Repeat("}]", shallowJSONDepth),
	strings.Repeat(`[`, shallowJSONDepth-1) + `{"a":1}` + strings.Repeat("]", shallowJSONDepth-1),
	strings.Repeat(`[`, shallowJSONDepth-1) + `{"a":[1}]` + strings.Repeat("]", shallowJSONDepth-1),
	strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
	strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
	strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth),
	strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1),
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range validJSONCases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid says %v", c, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, c := range validJSONCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func TestValidJSONAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; scripts/test runs this test without it")
	}
	b := []byte(`{"model":"fast","messages":[{"role":"user","content":"Say something short about configuration reloads."}]}`)
	if n := testing.AllocsPerRun(100, func() { validJSON(b) }); n != 0 {
		t.Fatalf("validJSON allocates %v times; want 0", n)
	}
}

// BenchmarkValidJSON compares validJSON with json.Valid on a chat
// completion body.
func BenchmarkValidJSON(b *testing.B) {
	body := []byte(`{"model":"fast","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say something short about configuration reloads, with \"quotes\" and \u00e9."}],"temperature":0.2,"max_tokens":64,"stream":false}`)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			validJSON(body)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			json.Valid(body)
		}
	})
}
