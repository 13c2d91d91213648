package schema

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/gateway"
)

const (
	examplesDir = "../../examples"
	invalidDir  = "../../internal/gateway/testdata/invalid"
	validDir    = "testdata/valid"
	schemaFile  = "../../docs/reconfd.schema.json"
)

// exampleEnv is what the examples' ${env:} references resolve to.
var exampleEnv = map[string]string{"UPSTREAM_API_KEY": "sk-example", "RECONFD_CLIENT_KEY": "client-example"}

// compileSchema compiles a schema with the validator, which checks it
// against the draft 2020-12 meta-schema first.
func compileSchema(t *testing.T, doc []byte) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("reconfd.schema.json", v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("reconfd.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// generated is the schema as the generator writes it now (without
// descriptions, which do not change a verdict).
func generated(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := reconf.JSONSchema[gateway.Config]()
	if err != nil {
		t.Fatal(err)
	}
	return compileSchema(t, doc)
}

// schemaVerdict returns the validator's error for a YAML document (nil:
// valid), or convErr when JSON cannot hold the document.
func schemaVerdict(s *jsonschema.Schema, data []byte) (verdict, convErr error) {
	j, err := yamlToJSON(data)
	if err != nil {
		return nil, err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	return s.Validate(inst), nil
}

// decoderVerdict loads a configuration as check-config does.
func decoderVerdict(t *testing.T, path string) *gateway.CheckReport {
	t.Helper()
	rep, err := gateway.Check(context.Background(), path, "", gateway.WithEnv(func(k string) (string, bool) {
		v, ok := exampleEnv[k]
		return v, ok
	}))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// header reads the "# key: value" lines that open a fixture.
func header(data []byte) map[string]string {
	h := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":"); ok && !strings.Contains(k, " ") {
			h[k] = strings.TrimSpace(v)
		}
	}
	return h
}

func glob(t *testing.T, dir string, atLeast int) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) < atLeast {
		t.Fatalf("%s: found %d fixtures (%v), want at least %d", dir, len(files), err, atLeast)
	}
	return files
}

// TestAgreement gives every example, every valid fixture and every
// invalid fixture to the decoder and to the schema. The verdicts must
// match, but for an invalid fixture whose header names, in "# excused:",
// the rule JSON Schema cannot say; there the schema must accept it (an
// excuse the schema no longer needs fails the test). At least 80% of the
// invalid fixtures are compared.
func TestAgreement(t *testing.T) {
	s := generated(t)
	valid := append(glob(t, examplesDir, 2), glob(t, validDir, 5)...)
	for _, f := range valid {
		data := read(t, f)
		if rep := decoderVerdict(t, f); !rep.Valid {
			t.Errorf("%s: the decoder refuses it (%s): %v", f, rep.Reason, rep.Problems)
		}
		verdict, convErr := schemaVerdict(s, data)
		if convErr != nil || verdict != nil {
			t.Errorf("%s: the decoder accepts it, the schema refuses it: %v%v", f, convErr, verdict)
		}
	}
	var compared, excused int
	for _, f := range glob(t, invalidDir, 29) {
		data := read(t, f)
		rep := decoderVerdict(t, f)
		if rep.Valid {
			t.Errorf("%s: the decoder accepts an invalid fixture", f)
			continue
		}
		verdict, convErr := schemaVerdict(s, data)
		rule, isExcused := header(data)["excused"]
		switch {
		case isExcused && rule == "":
			t.Errorf("%s: an excuse must name its rule", f)
		case isExcused && convErr == nil && verdict != nil:
			t.Errorf("%s: excused (%s), yet the schema refuses it too; drop the excuse", f, rule)
		case isExcused:
			excused++
		case convErr != nil:
			t.Errorf("%s: JSON cannot hold it (%v); excuse it with the rule", f, convErr)
		case verdict == nil:
			t.Errorf("%s: the decoder refuses it (%s at %s), the schema accepts it", f, rep.Reason, problemPath(rep))
		default:
			compared++
		}
	}
	t.Logf("valid: %d agree; invalid: %d compared, %d excused", len(valid), compared, excused)
	if total := compared + excused; compared*5 < total*4 {
		t.Errorf("only %d of %d invalid fixtures are compared, want at least 80%%", compared, total)
	}
}

func problemPath(rep *gateway.CheckReport) string {
	if len(rep.Problems) == 0 {
		return "?"
	}
	return rep.Problems[0].Path
}

func read(t *testing.T, f string) []byte {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestExamplesValidate checks each example against the published schema
// file, and that it names that file for yaml-language-server on its first
// line.
func TestExamplesValidate(t *testing.T) {
	s := compileSchema(t, read(t, schemaFile))
	for _, f := range glob(t, examplesDir, 2) {
		data := read(t, f)
		first, _, _ := strings.Cut(string(data), "\n")
		const want = "# yaml-language-server: $schema=../docs/reconfd.schema.json"
		if first != want {
			t.Errorf("%s: first line is %q, want %q", f, first, want)
		}
		verdict, convErr := schemaVerdict(s, data)
		if convErr != nil || verdict != nil {
			t.Errorf("%s: does not validate: %v%v", f, convErr, verdict)
		}
	}
}
