package gateway

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

func TestParseChat(t *testing.T) {
	for _, tc := range []struct {
		body   string
		model  string
		stream bool
		code   string // "" when accepted
	}{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "m", false, ""},
		{` { "messages" : [ {} ] , "stream" : true , "model" : "a\"b" } `, `a"b`, true, ""},
		{`{"model":null,"messages":[null,{"role":"user"}],"stream":null}`, "", false, ""},
		{`{"mod\u0065l":"x","messages":[{}]}`, "x", false, ""},
		// Keys that encoding/json reads as a field the gateway reads are
		// refused: by case, by escape, by Unicode simple folding.
		{`{"MODEL":"x","messages":[{}]}`, "", false, codeAmbiguousKey},
		{`{"model":"m","Messages":[{}],"messages":[{}]}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"Stream":true}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"Model":"x"}`, "", false, codeAmbiguousKey},
		{`{"model":"m","meſſages":[{}],"messages":[{}]}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"ſtream":true}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"ſtream":true}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"Models":"x","modeL ":"y","stream_":true}`, "m", false, ""},
		{`{"model":"m","messages":[{}],"extra":{"Model":"x"}}`, "m", false, ""},
		{`{"model":"m","messages":[{}],"stream":true,"stream_options":{"include_usage":true,"other":1}}`, "m", true, ""},
		{`{"model":"m","messages":[{}],"stream":true,"stream_options":null}`, "m", true, ""},
		{`{"model":"m","messages":[{}],"stream":true,"stream_options":{"include_usage":true,"Include_Usage":false}}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"stream":true,"Stream_Options":{}}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}],"stream":true,"stream_options":{"include_usage":1}}`, "", false, codeInvalidRequest},
		{`{"model":"m","messages":[{}],"stream":true,"stream_options":[]}`, "", false, codeInvalidRequest},
		{`{"model":"m","messages":[{}],"extra":{"model":"inner","messages":[]}}`, "m", false, ""},
		{`{"model":"m","messages":[]}`, "", false, codeInvalidRequest},
		{`{"model":"m"}`, "", false, codeInvalidRequest},
		{`{"model":"m","messages":null}`, "", false, codeInvalidRequest},
		{`{"model":5,"messages":[{}]}`, "", false, codeInvalidRequest},
		{`{"model":"m","messages":[{}],"stream":"yes"}`, "", false, codeInvalidRequest},
		{`{"model":"m","messages":{}}`, "", false, codeInvalidRequest},
		{`{"model":"m","messages":["hi"]}`, "", false, codeInvalidRequest},
		{`{"model":"a","model":"b","messages":[{}]}`, "", false, codeAmbiguousKey},
		{`{"model":"m","messages":[{}]`, "", false, codeInvalidJSON},
		{`[{"model":"m"}]`, "", false, codeInvalidJSON},
		{`null`, "", false, codeInvalidJSON},
		{``, "", false, codeInvalidJSON},
	} {
		c, p := parseChat([]byte(tc.body))
		switch {
		case tc.code != "" && (p == nil || p.code != tc.code):
			t.Errorf("%s: got %+v, want %s", tc.body, p, tc.code)
		case tc.code == "" && p != nil:
			t.Errorf("%s: refused: %s", tc.body, p.msg)
		case tc.code == "" && (string(c.model) != tc.model || c.stream != tc.stream):
			t.Errorf("%s: model %q stream %v, want %q %v", tc.body, c.model, c.stream, tc.model, tc.stream)
		}
	}
}

// TestUpstreamBody: the body sent upstream is the client's, byte for byte,
// but for the model's value and, with a system prompt, one message first.
func TestUpstreamBody(t *testing.T) {
	sys := []byte(`{"role":"system","content":"be brief"}`)
	for _, tc := range []struct{ in, system, want string }{
		{`{"model":"alias","messages":[{"role":"user"}],"temperature":0.5}`, "",
			`{"model":"real","messages":[{"role":"user"}],"temperature":0.5}`},
		{`{"messages":[{"role":"user"}]}`, "",
			`{"model":"real","messages":[{"role":"user"}]}`},
		{`{ "messages" : [ {"role":"user"} ] , "model" : null }`, "",
			`{ "messages" : [ {"role":"user"} ] , "model" : "real" }`},
		{`{"model":"alias","messages":[{"role":"user"}]}`, "sys",
			`{"model":"real","messages":[{"role":"system","content":"be brief"},{"role":"user"}]}`},
		{`{"messages":[ {"role":"user"}],"model":"alias"}`, "sys",
			`{"messages":[{"role":"system","content":"be brief"}, {"role":"user"}],"model":"real"}`},
		{`{"messages":[{"role":"user"}]}`, "sys",
			`{"model":"real","messages":[{"role":"system","content":"be brief"},{"role":"user"}]}`},
		// A stream asks for its usage.
		{`{"model":"alias","messages":[{"role":"user"}],"stream":true}`, "sys",
			`{"stream_options":{"include_usage":true},"model":"real","messages":[{"role":"system","content":"be brief"},{"role":"user"}],"stream":true}`},
		{`{"messages":[{"role":"user"}],"stream":true}`, "",
			`{"model":"real","stream_options":{"include_usage":true},"messages":[{"role":"user"}],"stream":true}`},
		{`{"stream_options":{"include_usage":false,"x":1},"messages":[{"role":"user"}],"stream":true,"model":"a"}`, "sys",
			`{"stream_options":{"include_usage":true,"x":1},"messages":[{"role":"system","content":"be brief"},{"role":"user"}],"stream":true,"model":"real"}`},
		{`{"stream_options":{"x":1},"messages":[{"role":"user"}],"stream":true}`, "",
			`{"model":"real","stream_options":{"include_usage":true,"x":1},"messages":[{"role":"user"}],"stream":true}`},
		{`{"stream_options":{ },"messages":[{"role":"user"}],"stream":true}`, "",
			`{"model":"real","stream_options":{"include_usage":true},"messages":[{"role":"user"}],"stream":true}`},
		{`{"stream_options":null,"messages":[{"role":"user"}],"stream":true}`, "",
			`{"model":"real","stream_options":{"include_usage":true},"messages":[{"role":"user"}],"stream":true}`},
		{`{"stream_options":{"include_usage":true},"messages":[{"role":"user"}]}`, "",
			`{"model":"real","stream_options":{"include_usage":true},"messages":[{"role":"user"}]}`},
	} {
		c, p := parseChat([]byte(tc.in))
		if p != nil {
			t.Fatalf("%s: %s", tc.in, p.msg)
		}
		var s []byte
		if tc.system != "" {
			s = sys
		}
		if got := string(c.upstreamBody(nil, []byte(`"real"`), s)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// FuzzParseChat: whatever the body, parseChat does not panic, and a body
// it accepts becomes an upstream body that is valid JSON with the same
// fields, the model replaced and the system message first.
func FuzzParseChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{}],"n":2,"stop":["\n"],"x":{"y":[1,2,{"z":"\"}]"}]}}`,
		` {"model" :"\u00e9\\","messages":[ null ]} `,
		`{"model":"m","messages":[]}`,
		`{}`, `[]`, `"model"`, `{"a":1`,
		`{"Model":"x","messages":[{}]}`, `{"messages":[{}],"MESSAGES":[]}`, `{"messages":[{}],"\u004dodel":"x"}`,
		`{"messages":[{}],"stream":true,"stream_options":{"y":{}}}`, `{"stream_options":{},"stream":true,"messages":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, p := parseChat(body)
		if p != nil {
			return
		}
		var in map[string]json.RawMessage
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("accepted a body that is not an object: %v", err)
		}
		out := c.upstreamBody(nil, []byte(`"real"`), []byte(`{"role":"system"}`))
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("upstream body is not JSON: %v\n%s", err, out)
		}
		var msgs, inMsgs []json.RawMessage
		if json.Unmarshal(got["messages"], &msgs) != nil || json.Unmarshal(in["messages"], &inMsgs) != nil ||
			len(msgs) != len(inMsgs)+1 || string(msgs[0]) != `{"role":"system"}` || string(got["model"]) != `"real"` {
			t.Fatalf("upstream body %s from %s", out, body)
		}
		// An upstream that decodes the way encoding/json does sees the
		// backend's model and the system message first, whatever the
		// keys' case or escapes.
		var dec struct {
			Model    string            `json:"model"`
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(out, &dec); err != nil || dec.Model != "real" || len(dec.Messages) == 0 || string(dec.Messages[0]) != `{"role":"system"}` {
			t.Fatalf("encoding/json reads model %q, messages %s from %s", dec.Model, dec.Messages, out)
		}
		if c.stream {
			// A stream asks for its usage, keeping the client's other
			// stream options.
			var so, inSo map[string]json.RawMessage
			if err := json.Unmarshal(got["stream_options"], &so); err != nil || string(so["include_usage"]) != "true" {
				t.Fatalf("stream_options %s from %s", got["stream_options"], body)
			}
			_ = json.Unmarshal(in["stream_options"], &inSo)
			delete(so, "include_usage")
			delete(inSo, "include_usage")
			if len(so) != len(inSo) {
				t.Fatalf("stream_options %s from %s", got["stream_options"], body)
			}
			delete(got, "stream_options")
			delete(in, "stream_options")
		}
		delete(got, "model")
		delete(got, "messages")
		delete(in, "model")
		delete(in, "messages")
		// Keys that differ only by escapes are one key to encoding/json.
		if !maps.EqualFunc(in, got, func(a, b json.RawMessage) bool { return strings.TrimSpace(string(a)) == strings.TrimSpace(string(b)) }) {
			t.Fatalf("other fields changed: %s from %s", out, body)
		}
	})
}

// FuzzParseChatOnce holds parseChat, which reads the body in the one pass
// of its validation, to parseChatWalk, which validates and then walks the
// top level: the same request and the same problem for every body.
func FuzzParseChatOnce(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"messages":[{}],"n":2,"stop":["\n"],"x":{"y":[1,2,{"z":"\"}]"}]}}`,
		` {"model" :"\u00e9\\","messages":[ null ]} `,
		`{"model":"m","messages":[]}`, `{"messages":[1,{}]}`, `{"messages":[[],{}]}`,
		`{"model":1,"model":"a","messages":[{}]}`, `{"stream":1,"stream":1}`,
		`{"model":"a","stream":true,"messages":[{}],"model":"b"}`,
		`{"model":"a","stream":true,"messages":[{}],"stream":false,"messages":null}`,
		`{"mod\u0065l":"a","messages":[{}],"model":"b"}`, `{"messages":{"a":[1]},"x":[{"messages":[]}]}`,
		`{"model":1,"Model":"a","messages":[{}]}`, `{"Messages":[1],"messages":[]}`, `{"model":"a","Mod\u0065l":"b"}`,
		`{"meſſages":[{}],"model":"a","stream":1,"messages":[{}],"x":1,"Stream":true}`,
		`{"messages":[{}],"stream":true,"stream_options":{"include_usage":true,"\u0069nclude_usage":false}}`,
		`{"messages":[{}],"stream":true,"stream_options":{"x":[1],"INCLUDE_USAGE":true},"stream_options":null}`,
		`{}`, `[]`, `[{"model":"m","messages":[{}]}]`, `"model"`, `{"a":1`, `{"messages":[{}]} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, p := parseChat(body)
		w, q := parseChatWalk(body)
		if (p == nil) != (q == nil) || p != nil && *p != *q {
			t.Fatalf("%q: problem %v, the walk's %v", body, p, q)
		}
		if p != nil {
			return
		}
		if string(c.model) != string(w.model) || c.modelAt != w.modelAt || c.stream != w.stream || c.messages != w.messages ||
			c.streamOptions != w.streamOptions || c.usageAt != w.usageAt || c.includeUsage != w.includeUsage {
			t.Fatalf("%q: read %+v, the walk read %+v", body, c, w)
		}
	})
}

// FuzzSkipValue holds skipValue to encoding/json's idea of where the first
// value of a valid JSON array ends: a json.Decoder reading the array's
// first element stops at the same byte.
func FuzzSkipValue(f *testing.F) {
	for _, c := range []string{`"a"`, `"a\"b"`, `"\\"`, `"\\\""`, `"x\u0022y"`, `{"a":"b\\","c":[1,"]"]}`, `[[],{}]`, `123`, `true`,
		`"` + strings.Repeat("long content ", 9) + `"`, `"` + strings.Repeat(`\\`, 9) + `"`, `{"k":"` + strings.Repeat(`\"`, 7) + `"}`} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		doc := append(append([]byte("["), v...), ",0]"...)
		if !json.Valid(doc) {
			return
		}
		d := json.NewDecoder(strings.NewReader(string(doc)))
		_, _ = d.Token() // [
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		start := skipSpace(doc, 1)
		want := int(d.InputOffset())
		if got := skipValue(doc, start); got != want {
			t.Fatalf("skipValue(%q) ends at %d, encoding/json at %d", doc, got, want)
		}
	})
}

// TestFieldListFolding holds fieldList.folded to encoding/json: a key is
// a variant of a field exactly when json.Unmarshal into a struct with
// that field sets it, and the key is not the field's name.
func TestFieldListFolding(t *testing.T) {
	keys := []string{"model", "Model", "MODEL", "mOdEl", "models", "mode", "modeł", "Stream", "ſtream", "STREAM", "\u017fTREAM",
		"meſſages", "MeSſAgEs", "messageſ", "messages_", "stream ", "\u006dodel", "\u004dodel", "K", "\u212a", `moDel\u0000`, `\u004dODEL`}
	for _, k := range keys {
		var key string
		if err := json.Unmarshal([]byte(`"`+k+`"`), &key); err != nil {
			t.Fatal(err)
		}
		for i, name := range chatFieldNames {
			doc, _ := json.Marshal(map[string]int{key: 1})
			set := jsonSetsField(t, name, string(doc))
			want := set && key != name
			if got := chatFields.folded([]byte(key)) == i; got != want {
				t.Errorf("key %q, field %q: folded %v, encoding/json sets the field: %v", key, name, got, set)
			}
		}
	}
}

// jsonSetsField reports whether json.Unmarshal of doc into a struct whose
// one field is named name sets that field.
func jsonSetsField(t *testing.T, name, doc string) bool {
	t.Helper()
	typ := reflect.StructOf([]reflect.StructField{{Name: "F", Type: reflect.TypeFor[*int](), Tag: reflect.StructTag(`json:"` + name + `"`)}})
	v := reflect.New(typ)
	if err := json.Unmarshal([]byte(doc), v.Interface()); err != nil {
		t.Fatal(err)
	}
	return !v.Elem().Field(0).IsNil()
}
