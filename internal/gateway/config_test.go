package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/reconfhq/reconf"
)

func TestEveryFieldClassified(t *testing.T) {
	if err := reconf.CheckClassified[Config](); err != nil {
		t.Fatal(err)
	}
}

// wantClasses is the contract of issue 4 (and of issue 11 for
// server.tls): which sections are live and which need a restart. A new field lands in one of them by inheritance;
// this test makes a change of class a deliberate edit.
func TestClassesFollowTheContract(t *testing.T) {
	for _, fc := range reconf.Classes[Config]() {
		var want reconf.Class
		switch {
		case strings.HasPrefix(fc.Path, "server.tls."):
			want = reconf.Live
		case strings.HasPrefix(fc.Path, "server."), fc.Path == "auth.mode":
			want = reconf.Restart
		case fc.Path == "logging.level", strings.HasPrefix(fc.Path, "auth.api_keys"), strings.HasPrefix(fc.Path, "limits."),
			strings.HasPrefix(fc.Path, "routing."), strings.HasPrefix(fc.Path, "backends"),
			strings.HasPrefix(fc.Path, "model_aliases"):
			want = reconf.Live
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
	classes := map[string]reconf.Class{}
	for _, fc := range reconf.Classes[Config]() {
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
				if !ok || c == reconf.Unclassified {
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

func TestValidation(t *testing.T) {
	const backends = `
backends:
  - {name: stub, kind: stub, model: m}
`
	cases := []struct {
		name, yaml string
		path       string // a problem at this path is expected
		detail     string // and its detail contains this
		reason     reconf.Reason
	}{
		{"workers negative", "server: {workers: -1}\nrouting: {default_route: stub}" + backends, "server.workers", "at least 1", reconf.ReasonValidation},
		{"workers too many", "server: {workers: 1000}\nrouting: {default_route: stub}" + backends, "server.workers", "at most 256", reconf.ReasonValidation},
		{"cluster endpoint not a URL", "server: {cluster: ['127.0.0.1:2379']}\nrouting: {default_route: stub}" + backends, "server.cluster[0]", "etcd client URL", reconf.ReasonValidation},
		{"cluster endpoint without port", "server: {cluster: ['http://h1:2379', 'http://h2']}\nrouting: {default_route: stub}" + backends, "server.cluster[1]", "host and port", reconf.ReasonValidation},
		{"cluster prefix", "server: {cluster_prefix: reconf}\nrouting: {default_route: stub}" + backends, "server.cluster_prefix", "must start with /", reconf.ReasonValidation},
		{"literal secret with workers", "server: {workers: 2}\nauth: {mode: api_keys, api_keys: [literal-key-1]}\nrouting: {default_route: stub}" + backends, "auth.api_keys[0]", "", reconf.ReasonSecretNotPropagate},
		{"literal secret with a cluster", "server: {cluster: ['http://127.0.0.1:2379']}\nauth: {mode: api_keys, api_keys: [literal-key-1]}\nrouting: {default_route: stub}" + backends, "auth.api_keys[0]", "", reconf.ReasonSecretNotPropagate},
		{"bad kind", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: llama, model: m}\n", "backends[stub].kind", "must be one of", reconf.ReasonValidation},
		{"openai without host", "routing: {default_route: up}\nbackends:\n  - {name: up, kind: openai, model: m}\n", "backends[up].host", "required", reconf.ReasonValidation},
		{"openai host with credentials", "routing: {default_route: up}\nbackends:\n  - {name: up, kind: openai, model: m, host: 'http://u:p@h/v1'}\n", "backends[up].host", "credentials", reconf.ReasonValidation},
		{"openai host not a URL", "routing: {default_route: up}\nbackends:\n  - {name: up, kind: openai, model: m, host: 'ftp://h'}\n", "backends[up].host", "http", reconf.ReasonValidation},
		{"stub with host", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub, model: m, host: 'http://h'}\n", "backends[stub].host", "only for kinds openai and anthropic", reconf.ReasonValidation},
		{"openai with stub options", "routing: {default_route: up}\nbackends:\n  - {name: up, kind: openai, model: m, host: 'http://h', stub: {tokens: 2}}\n", "backends[up].stub", "only for kind stub", reconf.ReasonValidation},
		{"default route unknown", "routing: {default_route: nope}" + backends, "routing.default_route", "must name a backend", reconf.ReasonValidation},
		{"default route missing", "routing: {max_attempts: 1}" + backends, "routing.default_route", "required", reconf.ReasonValidation},
		{"alias to nowhere", "routing: {default_route: stub}\nmodel_aliases: {gpt-4o: nope}" + backends, "model_aliases[gpt-4o]", "must name a backend", reconf.ReasonValidation},
		{"max attempts negative", "routing: {default_route: stub, max_attempts: -1}" + backends, "routing.max_attempts", "at least 1", reconf.ReasonValidation},
		{"timeout negative", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub, model: m, timeout: -1s}\n", "backends[stub].timeout", "greater than zero", reconf.ReasonValidation},
		{"concurrency negative", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub, model: m, max_concurrency: -1}\n", "backends[stub].max_concurrency", "at least 0", reconf.ReasonValidation},
		{"no backends", "routing: {default_route: stub}\n", "backends", "at least 1", reconf.ReasonValidation},
		{"duplicate backend", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub, model: m}\n  - {name: stub, kind: stub, model: n}\n", "backends[stub]", "duplicate", reconf.ReasonValidation},
		{"model missing", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub}\n", "backends[stub].model", "required", reconf.ReasonValidation},
		{"api_keys mode without keys", "auth: {mode: api_keys}\nrouting: {default_route: stub}" + backends, "auth.api_keys", "at least one key", reconf.ReasonValidation},
		{"keys without api_keys mode", "auth: {api_keys: [k1]}\nrouting: {default_route: stub}" + backends, "auth.api_keys", "auth.mode is none", reconf.ReasonValidation},
		{"bad auth mode", "auth: {mode: oauth}\nrouting: {default_route: stub}" + backends, "auth.mode", "must be one of", reconf.ReasonValidation},
		{"bad log level", "logging: {level: loud}\nrouting: {default_route: stub}" + backends, "logging.level", "must be one of", reconf.ReasonValidation},
		{"body limit zero or less", "limits: {max_request_body_bytes: -5}\nrouting: {default_route: stub}" + backends, "limits.max_request_body_bytes", "at least 1", reconf.ReasonValidation},
		{"stub tokens", "routing: {default_route: stub}\nbackends:\n  - {name: stub, kind: stub, model: m, stub: {tokens: -1}}\n", "backends[stub].stub.tokens", "at least 1", reconf.ReasonValidation},
		{"unknown field", "routing: {default_route: stub, retries: 3}" + backends, "routing.retries", "unknown", reconf.ReasonUnknownField},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			writeAtomic(t, path, tc.yaml)
			rep, err := Check(context.Background(), path, "")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Valid {
				t.Fatalf("got valid, want a problem at %s", tc.path)
			}
			if rep.Reason != tc.reason {
				t.Errorf("got reason %s, want %s (%s)", rep.Reason, tc.reason, rep.Message)
			}
			found := false
			for _, p := range rep.Problems {
				if p.Path == tc.path && strings.Contains(p.Detail, tc.detail) {
					found = true
				}
			}
			if !found {
				t.Errorf("no problem at %s containing %q; got %v", tc.path, tc.detail, rep.Problems)
			}
		})
	}
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
	for _, fc := range reconf.Classes[Config]() {
		row := "| `" + fc.Path + "` | " + fc.Class.String() + " |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/reconfd.md lacks the row %q", row)
		}
	}
}
