package gateway

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reconfhq/reconf"
)

// docRange is one numeric range of the configuration reference in
// docs/reconfd.md: min (inclusive unless open), and max when bounded.
type docRange struct {
	path     string // as the reference writes it: backends[*].timeout
	min      int64
	open     bool // greater than min
	max      int64
	bounded  bool
	duration bool
}

var (
	reRow     = regexp.MustCompile("^\\| `([^`]+)` \\| [a-z]+ \\| [^|]* \\| (.*) \\|$")
	reTo      = regexp.MustCompile(`^(-?\d+|\d+[smh]) to (-?\d+|\d+[smh])$`)
	reAtLeast = regexp.MustCompile(`^at least (-?\d+)$`)
	reGreater = regexp.MustCompile(`^greater than (-?\d+)$`)
)

// docRanges reads every numeric range of the reference's table: a clause
// of a row's rules that reads "N to M", "at least N" or "greater than N".
func docRanges(t *testing.T) map[string]docRange {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "reconfd.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]docRange{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Configuration reference"
			continue
		}
		m := reRow.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		for clause := range strings.SplitSeq(m[2], ";") {
			clause = strings.TrimSpace(clause)
			r := docRange{path: m[1]}
			num := func(s string) int64 {
				n, err := strconv.ParseInt(s, 10, 64)
				if d, derr := time.ParseDuration(s); err != nil && derr == nil {
					n, err = int64(d), nil
				}
				if err != nil {
					t.Fatalf("%s: %q: %v", m[1], clause, err)
				}
				return n
			}
			switch {
			case reTo.MatchString(clause):
				s := reTo.FindStringSubmatch(clause)
				r.min, r.max, r.bounded = num(s[1]), num(s[2]), true
			case reAtLeast.MatchString(clause):
				r.min = num(reAtLeast.FindStringSubmatch(clause)[1])
			case reGreater.MatchString(clause):
				r.min, r.open = num(reGreater.FindStringSubmatch(clause)[1]), true
			default:
				continue
			}
			if _, dup := out[r.path]; dup {
				t.Fatalf("%s: two ranges in the reference", r.path)
			}
			out[r.path] = r
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// numericPaths lists every integer or duration leaf of Config, in the
// reference's spelling (a list's or a map's elements as [*]).
func numericPaths(typ reflect.Type, prefix string, out map[string]bool) {
	switch typ.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if typ.Kind() != reflect.Pointer {
			prefix += "[*]"
		}
		numericPaths(typ.Elem(), prefix, out)
	case reflect.Struct:
		if typ == reflect.TypeFor[reconf.Strategy]() {
			// The library's strategy: its Validate checks it whole
			// (rollout_strategy_invalid, a problem per field), and its
			// ranges are documented with it (docs/design/rollout.md).
			return
		}
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			numericPaths(f.Type, p, out)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		out[prefix] = true
	}
}

// TestConfigRangesMatchTheReference checks every numeric range the
// reference documents against the real decoder and validator (Check): each
// bound is accepted and one step past it refused, with the field's path.
// Every integer and duration field must have a documented range.
func TestConfigRangesMatchTheReference(t *testing.T) {
	ranges := docRanges(t)
	fields := map[string]bool{}
	numericPaths(reflect.TypeFor[Config](), "", fields)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range fields {
			if !yield(p) {
				return
			}
		}
	}) {
		if _, ok := ranges[p]; !ok {
			t.Errorf("%s: a numeric field with no range in docs/reconfd.md's reference", p)
		}
	}
	for p := range ranges {
		if !fields[p] {
			t.Errorf("%s: a range in docs/reconfd.md's reference for no numeric field", p)
		}
	}
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range ranges {
			if !yield(p) {
				return
			}
		}
	}) {
		r := ranges[p]
		r.duration = strings.HasSuffix(p, "timeout") || strings.HasSuffix(p, "_delay") || p == "routing.cooldown" || p == "auth.keys[*].limits.per"
		type probe struct {
			v  int64
			ok bool
		}
		probes := []probe{{r.min, !r.open}, {r.min - 1, false}}
		if r.open {
			probes = []probe{{r.min, false}, {r.min + 1, true}}
		}
		if r.bounded {
			probes = append(probes, probe{r.max, true}, probe{r.max + 1, false})
		}
		for _, pr := range probes {
			val := any(pr.v)
			if r.duration {
				val = time.Duration(pr.v).String()
			}
			t.Run(fmt.Sprintf("%s=%v", p, val), func(t *testing.T) {
				rep := checkWith(t, p, val)
				if rep.Valid != pr.ok {
					t.Fatalf("valid: got %v, want %v (%s: %s %v)", rep.Valid, pr.ok, rep.Reason, rep.Message, rep.Problems)
				}
				if !pr.ok && !slices.ContainsFunc(rep.Problems, func(pb reconf.Problem) bool { return strings.HasSuffix(pb.Path, lastSegment(p)) }) {
					t.Errorf("the refusal names no path ending in %s: %v", lastSegment(p), rep.Problems)
				}
			})
		}
	}
}

func lastSegment(p string) string { return p[strings.LastIndex(p, ".")+1:] }

// checkWith checks baseConfig with the field at path (backends[*] meaning
// the first backend, a stub) set to v.
func checkWith(t *testing.T, path string, v any) *CheckReport {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(baseConfig), &doc); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(path, "auth.keys") {
		doc["auth"] = map[string]any{"mode": "api_keys", "keys": []any{map[string]any{"name": "k", "secret": "s"}}}
	}
	if strings.HasPrefix(path, "routing.models") {
		// A model routed to the base configuration's two stubs.
		doc["routing"].(map[string]any)["models"] = []any{map[string]any{
			"name": "spread", "deployments": []any{map[string]any{"backend": "stub"}}, "fallbacks": []any{"other"},
		}}
	}
	node := doc
	segs := strings.Split(path, ".")
	for _, seg := range segs[:len(segs)-1] {
		if name, ok := strings.CutSuffix(seg, "[*]"); ok {
			node = node[name].([]any)[0].(map[string]any)
			continue
		}
		next, ok := node[seg].(map[string]any)
		if !ok {
			next = map[string]any{}
			node[seg] = next
		}
		node = next
	}
	node[segs[len(segs)-1]] = v
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, file, string(b))
	rep, err := Check(context.Background(), file, "")
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
