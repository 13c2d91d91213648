package reconf_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
)

type schemaTree struct {
	Label    string       `yaml:"label" doc:"Label names the node."`
	Children []schemaTree `yaml:"children"`
}

type schemaDoc struct {
	Tree  schemaTree `yaml:"tree" reconf:"live"`
	Count int        `yaml:"count" reconf:"live" validate:"min=1"`
}

// TestJSONSchemaShape checks what the agreement test (e2e/schema) cannot
// see through a validator: the dialect, descriptions from a doc tag and
// from a table, a recursive type written once under $defs, and output
// that does not change between calls.
func TestJSONSchemaShape(t *testing.T) {
	b, err := reconf.JSONSchema[schemaDoc](reconf.WithDescriptions(map[string]string{
		"schemaDoc":       "The document.",
		"schemaDoc.Count": "Count counts.",
	}))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("got $schema %v, want draft 2020-12", got)
	}
	if got := doc["description"]; got != "The document." {
		t.Errorf("got description %v, want the table's", got)
	}
	props := doc["properties"].(map[string]any)
	if d := props["count"].(map[string]any)["description"].(string); !strings.HasPrefix(d, "Count counts.") || !strings.Contains(d, "Class: live") {
		t.Errorf("got count's description %q, want the table's and the class", d)
	}
	defs, _ := doc["$defs"].(map[string]any)
	tree, ok := defs["reconf_test.schemaTree"].(map[string]any)
	if !ok {
		t.Fatalf("got $defs %v, want the recursive type under it", defs)
	}
	label := tree["properties"].(map[string]any)["label"].(map[string]any)
	if d, _ := label["description"].(string); !strings.HasPrefix(d, "Label names the node.\n\nClass: live") {
		t.Errorf("got label's description %v, want the doc tag", label["description"])
	}
	if req := doc["required"]; req == nil || len(req.([]any)) != 1 {
		t.Errorf("got required %v, want [count]", req)
	}
	again, _ := reconf.JSONSchema[schemaDoc](reconf.WithDescriptions(map[string]string{
		"schemaDoc":       "The document.",
		"schemaDoc.Count": "Count counts.",
	}))
	if string(again) != string(b) {
		t.Errorf("two calls wrote different schemas")
	}
}

type schemaBadTag struct {
	N int `yaml:"n" validate:"between=1"`
}

// TestJSONSchemaTagError returns the tag mistake New would report.
func TestJSONSchemaTagError(t *testing.T) {
	if _, err := reconf.JSONSchema[schemaBadTag](); err == nil || !strings.Contains(err.Error(), "between") {
		t.Errorf("got %v, want the unknown rule", err)
	}
}

type schemaOptional struct {
	Name string `yaml:"name" default:"x"`
}

// TestJSONSchemaEmptyDocument accepts null where nothing is required: an
// empty file takes every default.
func TestJSONSchemaEmptyDocument(t *testing.T) {
	b, err := reconf.JSONSchema[schemaOptional]()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"type": "null"`) {
		t.Errorf("an empty document is valid, but the schema refuses null:\n%s", b)
	}
}
