package schema

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reconfhq/reconf"
)

// libConfig is a library user's type with every kind of field the schema
// tree knows, for the agreement test of reconf.JSONSchema.
type libConfig struct {
	Name      string            `yaml:"name" reconf:"live" validate:"required,max=8"`
	Port      *int              `yaml:"port" reconf:"restart" validate:"required,min=1,max=65535"`
	Weight    *float64          `yaml:"weight" reconf:"live" validate:"min=0.5,max=2"`
	Level     int8              `yaml:"level" reconf:"live"`
	Shards    uint16            `yaml:"shards" reconf:"live" default:"4"`
	Mode      string            `yaml:"mode" reconf:"live" default:"fast" validate:"oneof=fast safe"`
	Retries   int               `yaml:"retries" reconf:"live" validate:"oneof=1 3 5"`
	Enabled   bool              `yaml:"enabled" reconf:"live"`
	Token     reconf.Secret     `yaml:"token" reconf:"live" validate:"required"`
	Region    string            `yaml:"region" reconf:"restart" env:"LIB_REGION" validate:"required"`
	Bind      net.IP            `yaml:"bind" reconf:"restart"`
	Grace     time.Duration     `yaml:"grace" reconf:"live" default:"5s" validate:"min=0s"`
	Labels    map[string]string `yaml:"labels" reconf:"live" validate:"max=2"`
	Tags      []string          `yaml:"tags" reconf:"live" validate:"min=1"`
	Pair      [2]string         `yaml:"pair" reconf:"live"`
	Codes     map[int]string    `yaml:"codes" reconf:"live"`
	Tree      libNode           `yaml:"tree" reconf:"live"`
	Custom    libCustom         `yaml:"custom" reconf:"live"`
	Computed  string            `yaml:"computed" reconf:"derived"`
	LibInline `yaml:",inline" reconf:"live"`
}

type LibInline struct {
	Owner string `yaml:"owner" validate:"max=4"`
}

// libNode is recursive: the schema refers to itself through $defs.
type libNode struct {
	Label    string    `yaml:"label"`
	Children []libNode `yaml:"children"`
}

// libCustom reads itself: the schema says nothing of it.
type libCustom struct{ v string }

func (c *libCustom) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Value == "bad" {
		return errors.New("libCustom: a scalar other than bad")
	}
	c.v = n.Value
	return nil
}

// libBase is a valid document; the cases change one thing in it.
const libBase = "name: svc\nport: 80\ntoken: t\nregion: eu\ntags: [a]\nretries: 1\n"

// over returns libBase with each "key: value" line of doc in place of the
// base's line for that key (a value "-" drops the key), or added.
func over(doc string) string {
	lines := strings.Split(strings.TrimSuffix(libBase, "\n"), "\n")
	for _, l := range strings.Split(strings.TrimSuffix(doc, "\n"), "\n") {
		k, _, _ := strings.Cut(l, ":")
		i := slices.IndexFunc(lines, func(b string) bool { return strings.HasPrefix(b, k+":") })
		switch {
		case strings.HasSuffix(l, ": -") && i >= 0:
			lines = slices.Delete(lines, i, i+1)
		case i >= 0:
			lines[i] = l
		default:
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestLibraryAgreement compares reconf.New's verdict with the schema's for
// a library user's type.
func TestLibraryAgreement(t *testing.T) {
	doc, err := reconf.JSONSchema[libConfig]()
	if err != nil {
		t.Fatal(err)
	}
	s := compileSchema(t, doc)
	cases := []struct {
		name, doc string
		excused   string // the rule JSON Schema cannot say, if any
		valid     bool   // the decoder accepts it
	}{
		{"base", libBase, "", true},
		{"retries missing", over("retries: -"), "", false},
		{"all set", over("weight: 1.5\nlevel: -3\nshards: 0x10\nmode: safe\nretries: 3\nenabled: true\nbind: 10.0.0.1\ngrace: 0\nlabels: {a: b}\npair: [x]\ncodes: {404: nf, 0x1F4: ise}\ntree: {label: r, children: [{label: c, children: [{label: g}]}]}\ncustom: ok\nowner: me\n"), "", true},
		{"null lists, maps and pointers", over("weight: null\nlabels: ~\ncodes: null\n"), "", true},
		{"region absent", over("region: -"), "an env tag: the environment may set the field at load", false},
		{"unknown key", over("colour: red\n"), "", false},
		{"unknown key deep in the recursion", over("tree: {children: [{children: [{lable: x}]}]}\n"), "", false},
		{"unknown key in the inline struct's place", over("libinline: {owner: me}\n"), "", false},
		{"derived field set", over("computed: x\n"), "", false},
		{"name missing", over("name: -"), "", false},
		{"name too long", over("name: abcdefghi\n"), "", false},
		{"port missing", over("port: -"), "", false},
		{"port null", over("port: null\n"), "", false},
		{"port zero", over("port: 0\n"), "", false},
		{"port too high", over("port: 65536\n"), "", false},
		{"weight below", over("weight: 0.25\n"), "", false},
		{"weight above", over("weight: 2.5\n"), "", false},
		{"level beyond int8", over("level: 128\n"), "", false},
		{"level below int8", over("level: -129\n"), "", false},
		{"shards negative", over("shards: -1\n"), "", false},
		{"shards beyond uint16", over("shards: 65536\n"), "", false},
		{"mode not in oneof", over("mode: slow\n"), "", false},
		{"retries not in oneof", over("retries: 2\n"), "", false},
		{"enabled as text", over("enabled: yes\n"), "", false},
		{"token empty", over("token: ''\n"), "", false},
		{"token bad reference", over("token: ${env:}\n"), "", false},
		{"grace negative", over("grace: -1s\n"), "", false},
		{"grace without a unit", over("grace: 5\n"), "", false},
		{"grace finer than a nanosecond", over("grace: 0.5ns\n"), "a duration is a whole number of nanoseconds", false},
		{"labels over max", over("labels: {a: 1, b: 2, c: 3}\n"), "", false},
		{"tags empty", over("tags: []\n"), "", false},
		{"tags null", over("tags: null\n"), "", false},
		{"pair too long", over("pair: [a, b, c]\n"), "", false},
		{"codes key not an integer", over("codes: {nf: x}\n"), "", false},
		{"owner too long", over("owner: someone\n"), "", false},
		{"bind not an IP", over("bind: 10.0.0\n"), "a text type reads itself (net.IP.UnmarshalText)", false},
		{"custom refuses", over("custom: bad\n"), "a yaml.Unmarshaler reads itself", false},
		{"tree a list", over("tree: [a]\n"), "", false},
	}
	var compared, excused int
	for _, tc := range cases {
		decErr := libDecode(t, tc.doc)
		if (decErr == nil) != tc.valid {
			t.Errorf("%s: got decoder error %v, want valid %v", tc.name, decErr, tc.valid)
		}
		verdict, convErr := schemaVerdict(s, []byte(tc.doc))
		if convErr != nil {
			t.Errorf("%s: JSON cannot hold it: %v", tc.name, convErr)
			continue
		}
		switch {
		case decErr == nil && verdict != nil:
			t.Errorf("%s: the decoder accepts it, the schema refuses it: %v", tc.name, verdict)
		case decErr == nil:
		case tc.excused != "" && verdict != nil:
			t.Errorf("%s: excused (%s), yet the schema refuses it too; drop the excuse: %v", tc.name, tc.excused, verdict)
		case tc.excused != "":
			excused++
		case verdict == nil:
			t.Errorf("%s: the decoder refuses it (%v), the schema accepts it", tc.name, decErr)
		default:
			compared++
		}
	}
	t.Logf("library type: %d cases, invalid: %d compared, %d excused", len(cases), compared, excused)
	if compared*5 < (compared+excused)*4 {
		t.Errorf("only %d of %d invalid cases are compared, want at least 80%%", compared, compared+excused)
	}
}

// libDecode loads doc as a library user does; LIB_REGION is unset.
func libDecode(t *testing.T, doc string) error {
	t.Helper()
	ctx := context.Background()
	rt, err := reconf.New[libConfig](ctx, reconf.Bytes("lib", []byte(doc)),
		reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		reconf.WithEnv(func(string) (string, bool) { return "", false }))
	if err != nil {
		return err
	}
	return rt.Close(ctx)
}
