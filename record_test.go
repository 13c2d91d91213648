package reconf

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
	"go.yaml.in/yaml/v3"
)

type payloadInner struct {
	Name  string  `yaml:"name"`
	Port  uint16  `yaml:"port"`
	Ratio float32 `yaml:"ratio"`
}

// PayloadRegion is inlined into a test configuration.
type PayloadRegion struct {
	Region string `yaml:"region"`
}

type payloadConfig struct {
	Server struct {
		Address string `yaml:"address"`
		Tuning  struct {
			Level int `yaml:"level" reconf:"live"`
			Fixed int `yaml:"fixed"`
		} `yaml:"tuning"`
	} `yaml:"server" reconf:"restart"`
	Live struct {
		PayloadRegion `yaml:",inline"`
		Text          string                  `yaml:"text"`
		Flag          bool                    `yaml:"flag"`
		Small         int8                    `yaml:"small"`
		Big           int64                   `yaml:"big"`
		Huge          uint64                  `yaml:"huge"`
		F64           float64                 `yaml:"f64"`
		Wait          time.Duration           `yaml:"wait"`
		Key           Secret                  `yaml:"key"`
		When          time.Time               `yaml:"when"`
		Addr          netip.Addr              `yaml:"addr"`
		Ptr           *payloadInner           `yaml:"ptr"`
		NilPtr        *payloadInner           `yaml:"nil_ptr"`
		List          []payloadInner          `yaml:"list"`
		Empty         []string                `yaml:"empty"`
		Arr           [2]int                  `yaml:"arr"`
		ByName        map[string]payloadInner `yaml:"by_name"`
		Nested        [][]string              `yaml:"nested"`
	} `yaml:"live" reconf:"live"`
	Aliases map[string]string `yaml:"aliases" reconf:"live"`
	Limit   int               `yaml:"limit" reconf:"live" env:"PAYLOAD_LIMIT"`
}

const payloadPublisher = `server:
  address: 10.0.0.1:80
  tuning: {level: 7, fixed: 1}
live:
  region: eu-west
  text: "quotes \" and \\ and \t tab, <html> & unicode é ✓"
  flag: true
  small: -128
  big: -9223372036854775808
  huge: 18446744073709551615
  f64: 0.1
  wait: 1m30s
  key: ${env:PAYLOAD_KEY}
  when: 2026-12-02T07:16:36.5Z
  addr: 127.0.0.1
  ptr: {name: p, port: 65535, ratio: 0.1}
  list:
    - {name: a, port: 1}
    - {name: b, ratio: 2.5}
  empty: []
  arr: [3, 4]
  by_name:
    x: {name: x}
    "key with spaces": {port: 9}
  nested: [[a, b], [], [c]]
aliases: {gpt: a, "": b}
limit: 5
`

// payloadFollower has other bootstrap fields and other live values, which
// the record replaces.
const payloadFollower = `server:
  address: 10.0.0.2:80
  tuning: {level: 1, fixed: 2}
live:
  text: local
  list: [{name: local}]
  by_name: {local: {name: local}}
aliases: {local: x}
limit: 1
`

var ctx = context.Background()

// decodeInto decodes a payload into a new value, as a follower starts it.
func decodeInto[T any](data []byte, cfg *T) error {
	root := mustSchema(reflect.TypeFor[T]())
	v := reflect.ValueOf(cfg).Elem()
	v.SetZero()
	fillDefaults(root, v)
	return decodePayload(data, root, v)
}

func payloadCompiler(env map[string]string) *compiler[payloadConfig] {
	return &compiler[payloadConfig]{propagated: true, lookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}}
}

// TestPayloadMatchesYAML compiles the same record over the same local
// source through the JSON payload and through the YAML one: the
// candidates must be equal field by field, with every live field the
// publisher's and every bootstrap field the follower's.
func TestPayloadMatchesYAML(t *testing.T) {
	env := map[string]string{"PAYLOAD_KEY": "canary-secret-value"}
	pub, err := payloadCompiler(env).compile(ctx, []byte(payloadPublisher))
	if err != nil {
		t.Fatal(err)
	}
	payload, format, err := encodePayload(pub.cfg)
	if err != nil || format != formatJSON {
		t.Fatalf("got format %q, error %v; want %q", format, err, formatJSON)
	}
	if strings.Contains(string(payload), "canary-secret-value") || !strings.Contains(string(payload), `"${env:PAYLOAD_KEY}"`) {
		t.Fatalf("the payload must carry the secret's reference, never its value: %s", payload)
	}
	yamlLive, err := encodeLive(pub.cfg)
	if err != nil {
		t.Fatal(err)
	}
	fol := payloadCompiler(env)
	viaJSON, err := fol.compileRecord(ctx, []byte(payloadFollower), fleet.Record{Live: payload, Format: formatJSON})
	if err != nil {
		t.Fatal(err)
	}
	viaYAML, err := fol.compileRecord(ctx, []byte(payloadFollower), fleet.Record{Live: yamlLive})
	if err != nil {
		t.Fatal(err)
	}
	got, want := encode(viaJSON.cfg, nil), encode(viaYAML.cfg, nil)
	if p, differ := firstDifference(got, want); differ {
		t.Fatalf("the JSON and YAML payloads compile differently at %s", p)
	}
	local, err := fol.compile(ctx, []byte(payloadFollower))
	if err != nil {
		t.Fatal(err)
	}
	pubLive, folLive := classEntries(encode(pub.cfg, nil), classLive), classEntries(got, classLive)
	if p, differ := firstDifference(pubLive, folLive); differ {
		t.Errorf("live field %s differs from the publisher's", p)
	}
	if p, differ := firstDifference(classEntries(encode(local.cfg, nil), classRestart), classEntries(got, classRestart)); differ {
		t.Errorf("bootstrap field %s differs from the follower's own", p)
	}
	c := viaJSON.cfg
	if c.Server.Address != "10.0.0.2:80" || c.Server.Tuning.Level != 7 || c.Server.Tuning.Fixed != 2 || c.Live.Key.Reveal() != "canary-secret-value" || c.Live.Huge != math.MaxUint64 {
		t.Errorf("got %+v", c)
	}
	// An older follower reads the JSON payload as YAML, and gets the same.
	old, err := fol.compileWith(ctx, []byte(payloadFollower), payload, false)
	if err != nil {
		t.Fatalf("the JSON payload is not YAML an older follower can decode: %v", err)
	}
	if p, differ := firstDifference(encode(old.cfg, nil), got); differ {
		t.Fatalf("read as YAML, the JSON payload compiles differently at %s", p)
	}
}

func classEntries(es []entry, c fieldClass) []entry {
	var out []entry
	for _, e := range es {
		if e.class == c {
			out = append(out, e)
		}
	}
	return out
}

// TestPayloadIsCanonical: equal configurations give equal bytes, keys are
// sorted, and zero values are left out.
func TestPayloadIsCanonical(t *testing.T) {
	env := map[string]string{"PAYLOAD_KEY": "v"}
	var last []byte
	for range 5 { // map iteration order differs from run to run
		pub, err := payloadCompiler(env).compile(ctx, []byte(payloadPublisher))
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := encodePayload(pub.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if last != nil && string(b) != string(last) {
			t.Fatalf("two encodings of one configuration differ:\n%s\n%s", b, last)
		}
		last = b
	}
	if !strings.HasPrefix(string(last), `{"aliases":{"":"b","gpt":"a"},"limit":5,"live":{"addr":"127.0.0.1","arr":[3,4],"big":-9223372036854775808,"by_name":{"key with spaces":{"port":9},"x":{"name":"x"}},"empty":[],"f64":0.1,"flag":true,"huge":18446744073709551615,"key":"${env:PAYLOAD_KEY}","list":[{"name":"a","port":1},{"name":"b","ratio":2.5}],"nested":[["a","b"],[],["c"]],"ptr":{"name":"p","port":65535,"ratio":0.1}`) {
		t.Errorf("got %s", last)
	}
	if !strings.HasSuffix(string(last), `"server":{"tuning":{"level":7}}}`) {
		t.Errorf("got %s", last)
	}
}

// TestFollowerEnvWins: a live field with an env override takes the
// follower's environment, not the publisher's value, when the follower
// sets the variable; otherwise the publisher's.
func TestFollowerEnvWins(t *testing.T) {
	pub, err := payloadCompiler(map[string]string{"PAYLOAD_KEY": "v", "PAYLOAD_LIMIT": "50"}).compile(ctx, []byte(payloadPublisher))
	if err != nil {
		t.Fatal(err)
	}
	payload, _, _ := encodePayload(pub.cfg)
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{"PAYLOAD_KEY": "v", "PAYLOAD_LIMIT": "9"}, 9},
		{map[string]string{"PAYLOAD_KEY": "v"}, 50},
	} {
		cand, err := payloadCompiler(tc.env).compileRecord(ctx, []byte(payloadFollower), fleet.Record{Live: payload, Format: formatJSON})
		if err != nil {
			t.Fatal(err)
		}
		if cand.cfg.Limit != tc.want {
			t.Errorf("env %v: got limit %d, want %d", tc.env, cand.cfg.Limit, tc.want)
		}
	}
}

// TestRecordBaseIsNotShared: the follower's decoded local source is kept
// across applies; no candidate may share a map or slice with it.
func TestRecordBaseIsNotShared(t *testing.T) {
	type shared struct {
		Boot struct {
			Tags  map[string]string `yaml:"tags"`
			Hosts []string          `yaml:"hosts"`
			Key   Secret            `yaml:"key"`
			Keys  map[string]Secret `yaml:"keys"`
		} `yaml:"boot" reconf:"restart"`
		N int `yaml:"n" reconf:"live"`
	}
	c := &compiler[shared]{lookupEnv: func(string) (string, bool) { return "resolved", true }}
	local := []byte("boot: {tags: {a: b}, hosts: [h1], key: '${env:K}', keys: {x: '${env:K}'}}\nn: 1\n")
	for i := range 3 {
		cand, err := c.compileRecord(ctx, local, fleet.Record{Live: []byte(`{"n":` + string(rune('2'+i)) + `}`), Format: formatJSON})
		if err != nil {
			t.Fatal(err)
		}
		if cand.cfg.Boot.Keys["x"].Reveal() != "resolved" || cand.cfg.N != 2+i {
			t.Fatalf("apply %d: got %+v", i, cand.cfg)
		}
		cand.cfg.Boot.Tags["a"] = "changed"
		cand.cfg.Boot.Hosts[0] = "changed"
	}
	base := c.base.cfg
	if base.Boot.Tags["a"] != "b" || base.Boot.Hosts[0] != "h1" {
		t.Fatalf("a candidate shares the local source's maps or slices: %+v", base.Boot)
	}
	if _, ref := base.Boot.Keys["x"].Reference(); !ref || base.Boot.Keys["x"].b.resolved {
		t.Fatal("resolving a candidate's secrets resolved the kept local source's")
	}
}

// TestPayloadRefusals: what a publisher never writes is refused with a
// stable reason, and nothing of the payload's content is quoted.
func TestPayloadRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		want          Reason
		path          string
	}{
		{"nested element", `{"live":{"list":[{"name":"a"},{"port":-1}]}}`, ReasonFieldType, "live.list[1].port"},
		{"map value", `{"live":{"by_name":{"k":{"ratio":"x"}}}}`, ReasonFieldType, "live.by_name[k].ratio"},
		{"syntax", `{"limit":`, ReasonMalformed, ""},
		{"trailing", `{"limit":1} {}`, ReasonTrailingContent, ""},
		{"not an object", `[1]`, ReasonFieldType, ""},
		{"unknown field", `{"nope":1}`, ReasonUnknownField, ""},
		{"a bootstrap field", `{"server":{"address":"x"}}`, ReasonUnknownField, ""},
		{"a bootstrap field beside a live one", `{"server":{"tuning":{"fixed":3}}}`, ReasonUnknownField, ""},
		{"string for int", `{"limit":"5"}`, ReasonFieldType, ""},
		{"fraction for int", `{"limit":1.5}`, ReasonFieldType, ""},
		{"overflow", `{"live":{"small":128}}`, ReasonFieldType, ""},
		{"negative uint", `{"live":{"huge":-1}}`, ReasonFieldType, ""},
		{"bad duration", `{"live":{"wait":"soon"}}`, ReasonFieldType, ""},
		{"bad text", `{"live":{"addr":"not-an-address"}}`, ReasonFieldType, ""},
		{"literal secret", `{"live":{"key":"hunter2-canary"}}`, reasons.SecretNotPropagate, ""},
		{"array too long", `{"live":{"arr":[1,2,3]}}`, ReasonFieldType, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := payloadCompiler(map[string]string{"PAYLOAD_KEY": "v"}).compileRecord(ctx, []byte(payloadFollower), fleet.Record{Live: []byte(tc.payload), Format: formatJSON})
			var e *Error
			if !errors.As(err, &e) || e.Reason != tc.want {
				t.Fatalf("got %v, want reason %s", err, tc.want)
			}
			if tc.path != "" && (len(e.Problems) != 1 || e.Problems[0].Path != tc.path) {
				t.Fatalf("got problems %+v, want path %s", e.Problems, tc.path)
			}
			if strings.Contains(e.Error(), "hunter2") {
				t.Fatalf("the error quotes the payload: %v", e)
			}
		})
	}
}

type yamlOnly struct{ v string }

func (y *yamlOnly) UnmarshalYAML(n *yaml.Node) error { y.v = n.Value; return nil }
func (y yamlOnly) MarshalYAML() (any, error)         { return y.v, nil }

// TestPayloadFallsBackToYAML: a live type with its own YAML unmarshaler,
// or a value JSON cannot hold, makes the publisher write YAML, which a
// follower applies as before.
func TestPayloadFallsBackToYAML(t *testing.T) {
	type custom struct {
		C yamlOnly `yaml:"c" reconf:"live"`
	}
	if _, format, err := encodePayload(&custom{C: yamlOnly{"x"}}); err != nil || format != formatYAML {
		t.Errorf("custom unmarshaler: got %q %v, want YAML", format, err)
	}
	type values struct {
		F float64 `yaml:"f" reconf:"live"`
		S string  `yaml:"s" reconf:"live"`
	}
	// NaN and infinities cannot be configured (the decoder refuses them),
	// and YAML text is UTF-8 ("\xff" is U+00FF), but a value built in code
	// (an override) may hold one: it travels as YAML.
	for _, v := range []values{{F: math.NaN()}, {F: math.Inf(1)}, {S: "\xff\xfe"}} {
		b, format, err := encodePayload(&v)
		if err != nil || format != formatYAML {
			t.Errorf("%v: got %q %q %v, want YAML", v, b, format, err)
		}
	}
}

// TestPayloadYAMLFallbackRoundTrips: a string that is not UTF-8 (set by
// an override) makes the payload YAML, which writes it as !!binary; a
// follower must decode the bytes it stands for, not its base64 text,
// wherever a string goes (a field, a list element, a map key or value),
// or it runs other content than the publisher under the same version.
func TestPayloadYAMLFallbackRoundTrips(t *testing.T) {
	type values struct {
		S  string            `yaml:"s" reconf:"live"`
		L  []string          `yaml:"l" reconf:"live"`
		M  map[string]string `yaml:"m" reconf:"live"`
		MI map[string]int    `yaml:"mi" reconf:"live"`
	}
	long := strings.Repeat("\xff", 100) // base64 past a line's length
	want := values{S: "a\xff\xfeb", L: []string{"ok", "\xfe", long}, M: map[string]string{"k\xff": "v\xfe", "plain": "text"}, MI: map[string]int{"\xc3": 1}}
	b, format, err := encodePayload(&want)
	if err != nil || format != formatYAML {
		t.Fatalf("got %q %v, want YAML", format, err)
	}
	got, err := (&compiler[values]{}).compileRecord(ctx, []byte("s: x\n"), fleet.Record{Live: b, Format: format})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got.cfg, want) {
		t.Fatalf("the follower decoded %#v, the publisher had %#v", *got.cfg, want)
	}
	// A !!binary value that is not base64 is refused, with its path.
	_, err = (&compiler[values]{}).compileRecord(ctx, []byte("s: x\n"), fleet.Record{Live: []byte("s: !!binary '*not base64*'\n"), Format: formatYAML})
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonFieldType || len(e.Problems) == 0 || e.Problems[0].Path != "s" {
		t.Fatalf("a !!binary value that is not base64: %v", err)
	}
}

// TestPayloadIntegerMapKeys: a map with integer keys travels (its keys
// are JSON strings, parsed back).
func TestPayloadIntegerMapKeys(t *testing.T) {
	type keyed struct {
		M map[int]uint8 `yaml:"m" reconf:"live"`
	}
	b, format, err := encodePayload(&keyed{M: map[int]uint8{-2: 1, 10: 255}})
	if err != nil || format != formatJSON || string(b) != `{"m":{"-2":1,"10":255}}` {
		t.Fatalf("got %s %q %v", b, format, err)
	}
	var back keyed
	if err := decodeInto(b, &back); err != nil || back.M[-2] != 1 || back.M[10] != 255 {
		t.Fatalf("got %+v %v", back, err)
	}
	if err := decodeInto([]byte(`{"m":{"x":1}}`), &back); err == nil {
		t.Fatal("a key that is not an integer was accepted")
	}
}

// TestRecursiveTypeTerminates: a configuration type that holds itself
// is analysed and encoded without running forever.
func TestRecursiveTypeTerminates(t *testing.T) {
	type tree struct {
		Name  string `yaml:"name" reconf:"restart"`
		Level int    `yaml:"level" reconf:"live"`
		Child *tree  `yaml:"child"`
	}
	cfg := &tree{Name: "a", Level: 1, Child: &tree{Name: "b", Level: 2}}
	b, format, err := encodePayload(cfg)
	if err != nil || format != formatJSON || string(b) != `{"child":{"level":2},"level":1}` {
		t.Fatalf("got %s %q %v", b, format, err)
	}
	var back tree
	if err := decodeInto(b, &back); err != nil || back.Level != 1 || back.Child.Level != 2 {
		t.Fatalf("got %+v %v", back, err)
	}
}

// TestApplyCarriesJSONRecords: a cluster worker publishes formatJSON, and a
// second worker applies it through Apply.
func TestApplyCarriesJSONRecords(t *testing.T) {
	ch := &faultChannel{}
	env := WithEnv(func(k string) (string, bool) { return "v", k == "PAYLOAD_KEY" })
	a, err := New[payloadConfig](context.Background(), Bytes("a", []byte(payloadFollower)), withChannel(ch), env, WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	_, rec := ch.current()
	if rec.Format != formatJSON {
		t.Fatalf("published format %q, want %q", rec.Format, formatJSON)
	}
	b, err := New[payloadConfig](context.Background(), Bytes("b", []byte(payloadFollower)), WithEnv(noEnv), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	pub, err := payloadCompiler(map[string]string{"PAYLOAD_KEY": "v"}).compile(ctx, []byte(payloadPublisher))
	if err != nil {
		t.Fatal(err)
	}
	payload, _, _ := encodePayload(pub.cfg)
	res, err := a.applyVersion(context.Background(), 2, fleet.Record{Live: payload, Format: formatJSON, Fingerprint: rec.Fingerprint})
	if err != nil || res.Outcome != Published {
		t.Fatalf("apply: %s %s %s %v", res.Outcome, res.Reason, res.Message, err)
	}
	if got := a.Current().Config().Live.List; len(got) != 2 || got[1].Ratio != 2.5 || !reflect.DeepEqual(a.Current().Config().Server.Address, "10.0.0.2:80") {
		t.Fatalf("got %+v", a.Current().Config())
	}
}

// TestPayloadExplicitZeroOverDefault: a field left out of the payload is
// one that holds its default; an explicit zero over a non-zero default
// travels, in fields, pointers, nested structs and list elements.
func TestPayloadExplicitZeroOverDefault(t *testing.T) {
	type item struct {
		Name string `yaml:"name"`
		K    int    `yaml:"k" default:"5"`
	}
	type withDefaults struct {
		N int  `yaml:"n" reconf:"live" default:"2"`
		P *int `yaml:"p" reconf:"live" default:"3"`
		S struct {
			M int `yaml:"m" default:"4"`
		} `yaml:"s" reconf:"live"`
		L []item `yaml:"l" reconf:"live"`
	}
	c := &compiler[withDefaults]{}
	for _, tc := range []struct{ pub, local, payload string }{
		{"n: 0\np: 0\ns: {m: 0}\nl: [{name: a, k: 0}, {name: b}]", "", `{"l":[{"k":0,"name":"a"},{"name":"b"}],"n":0,"p":0,"s":{"m":0}}`},
		{"", "n: 9\np: 9\ns: {m: 9}\nl: [{name: x, k: 9}]", `{}`},
	} {
		pub, err := c.compile(ctx, []byte(tc.pub))
		if err != nil {
			t.Fatal(err)
		}
		b, format, err := encodePayload(pub.cfg)
		if err != nil || format != formatJSON || string(b) != tc.payload {
			t.Fatalf("publisher %q: got %s %q %v, want %s", tc.pub, b, format, err, tc.payload)
		}
		got, err := (&compiler[withDefaults]{}).compileRecord(ctx, []byte(tc.local), fleet.Record{Live: b, Format: formatJSON})
		if err != nil {
			t.Fatal(err)
		}
		if p, differ := firstDifference(encode(got.cfg, nil), encode(pub.cfg, nil)); differ {
			t.Errorf("publisher %q over local %q: %s differs", tc.pub, tc.local, p)
		}
	}
}
