package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fieldclass"
)

func TestEveryFieldClassified(t *testing.T) {
	if err := fieldclass.Check(reflect.TypeFor[Config]()); err != nil {
		t.Fatal(err)
	}
}

// wantClasses is the contract of issue 4 (and of issue 11 for
// server.tls and the connection bounds, which apply per new connection):
// which sections are live and which need a restart. A new field lands in
// one of them by inheritance; this test makes a change of class a
// deliberate edit.
func TestClassesFollowTheContract(t *testing.T) {
	for _, fc := range fieldclass.Of(reflect.TypeFor[Config]()) {
		var want string
		switch {
		case strings.HasPrefix(fc.Path, "server.tls."), fc.Path == "server.max_connections", fc.Path == "server.max_connections_per_address":
			want = "live"
		case strings.HasPrefix(fc.Path, "server."), fc.Path == "auth.mode":
			want = "restart"
		case fc.Path == "logging.level", strings.HasPrefix(fc.Path, "auth.api_keys"), strings.HasPrefix(fc.Path, "auth.keys"), strings.HasPrefix(fc.Path, "limits."),
			strings.HasPrefix(fc.Path, "routing."), strings.HasPrefix(fc.Path, "backends"),
			strings.HasPrefix(fc.Path, "model_aliases"), strings.HasPrefix(fc.Path, "rollout."), strings.HasPrefix(fc.Path, "observability."):
			want = "live"
		default:
			t.Errorf("%s: a path outside the known sections; add it to this test", fc.Path)
			continue
		}
		if fc.Class != want {
			t.Errorf("%s: got class %v, want %v", fc.Path, fc.Class, want)
		}
	}
}

var indexSeg = regexp.MustCompile(`\[[^\]]*\]`)

// TestExamplesFieldsClassified walks every field written in the example
// files and requires each to be a classified path of Config, and loads each
// example with the real compiler.
func TestExamplesFieldsClassified(t *testing.T) {
	classes := map[string]string{}
	for _, fc := range fieldclass.Of(reflect.TypeFor[Config]()) {
		classes[fc.Path] = fc.Class
	}
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) < 2 {
		t.Fatalf("found %d example files, want at least 2", len(files))
	}
	env := map[string]string{"UPSTREAM_API_KEY": "sk-example", "RECONFD_CLIENT_KEY": "client-example"}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var root yaml.Node
			if err := yaml.Unmarshal(data, &root); err != nil {
				t.Fatal(err)
			}
			var leaves []string
			walkYAML(&root, "", &leaves)
			if len(leaves) < 10 {
				t.Fatalf("only %d leaves found", len(leaves))
			}
			for _, p := range leaves {
				norm := indexSeg.ReplaceAllString(p, "[*]")
				c, ok := classes[norm]
				if !ok {
					// A list or map written empty ("api_keys: []").
					c, ok = classes[norm+"[*]"]
				}
				if !ok {
					// A map key: "model_aliases.fast" is model_aliases[*].
					segs := strings.Split(norm, ".")
					for i := 1; i < len(segs) && !ok; i++ {
						cand := strings.Join(segs[:i], ".") + "[*]"
						if rest := strings.Join(segs[i+1:], "."); rest != "" {
							cand += "." + rest
						}
						c, ok = classes[cand]
					}
				}
				if !ok || c == "unclassified" {
					t.Errorf("%s: no class (normalized %s)", p, norm)
				}
			}
			rep, err := Check(context.Background(), f, "", WithEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
			if err != nil || !rep.Valid {
				t.Fatalf("example does not load: %v %+v", err, rep)
			}
		})
	}
}

func walkYAML(n *yaml.Node, path string, out *[]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkYAML(c, path, out)
		}
	case yaml.MappingNode:
		if len(n.Content) == 0 {
			*out = append(*out, path)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			walkYAML(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			*out = append(*out, path)
		}
		for i, c := range n.Content {
			walkYAML(c, path+"["+strconv.Itoa(i)+"]", out)
		}
	default:
		*out = append(*out, path)
	}
}

// TestLocalStubRunsAsIs loads the first example of the README with no
// environment at all.
func TestLocalStubRunsAsIs(t *testing.T) {
	rep, err := Check(context.Background(), "../../examples/local-stub.yaml", "", WithEnv(func(string) (string, bool) { return "", false }))
	if err != nil || !rep.Valid {
		t.Fatalf("got %v %+v, want valid", err, rep)
	}
}

// TestValidation loads each configuration in testdata/invalid and finds
// the refusal its header names: "# reason:", "# path:" (empty for the
// document) and "# detail:" (a part of the problem's detail). The same files are the invalid half of
// the JSON Schema agreement test (e2e/schema).
func TestValidation(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) < 29 {
		t.Fatalf("found %d invalid fixtures (%v), want at least 29", len(files), err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := fixtureHeader(data)
			if _, ok := want["path"]; !ok || want["reason"] == "" {
				t.Fatalf("the header names no reason or path")
			}
			path := filepath.Join(t.TempDir(), "c.yaml")
			writeAtomic(t, path, string(data))
			rep, err := Check(context.Background(), path, "")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Valid {
				t.Fatalf("got valid, want a problem at %s", want["path"])
			}
			if string(rep.Reason) != want["reason"] {
				t.Errorf("got reason %s, want %s (%s)", rep.Reason, want["reason"], rep.Message)
			}
			found := false
			for _, p := range rep.Problems {
				if p.Path == want["path"] && strings.Contains(p.Detail, want["detail"]) {
					found = true
				}
			}
			if !found {
				t.Errorf("no problem at %s containing %q; got %v", want["path"], want["detail"], rep.Problems)
			}
		})
	}
}

// fixtureHeader reads the "# key: value" lines that open a fixture.
func fixtureHeader(data []byte) map[string]string {
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

func TestDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, "routing: {default_route: s}\nbackends:\n  - {name: s, kind: stub, model: m}\n")
	g, err := New(context.Background(), path, WithLogOutput(&logBuffer{}))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	c := g.Config()
	if c.Server.Address != "127.0.0.1:8080" || c.Server.Workers != 1 || c.Logging.Level != "info" || c.Auth.Mode != "none" ||
		c.Limits.MaxRequestBodyBytes != 1<<20 || c.Routing.MaxAttempts != 1 || c.Backends[0].Timeout.String() != "30s" {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestSystemPromptFileMissingFailsLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, "routing: {default_route: up}\nbackends:\n  - {name: up, kind: openai, model: m, host: 'http://127.0.0.1:9/v1', system_prompt_file: missing.txt}\n")
	_, err := New(context.Background(), path, WithLogOutput(&logBuffer{}))
	var ce *reconf.ConsumerError
	if !errors.As(err, &ce) || !errors.Is(err, errPromptMissing) {
		t.Fatalf("got %v, want a consumer error wrapping errPromptMissing", err)
	}
}

// TestDocsListEveryClass keeps the configuration reference in
// docs/reconfd.md in step with the code: every field's row with its class.
func TestDocsListEveryClass(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reconfd.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, fc := range fieldclass.Of(reflect.TypeFor[Config]()) {
		row := "| `" + fc.Path + "` | " + fc.Class + " |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/reconfd.md lacks the row %q", row)
		}
	}
}
