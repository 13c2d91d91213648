package reconf

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const modulePath = "github.com/reconfhq/reconf"

// TestLayering holds every package of the module to the map in doc.go's
// "Packages" section: each package is in the map, each entry is a
// package, and each import from the module is one its entry allows. Test
// files' imports are not checked (tests may reach any package).
func TestLayering(t *testing.T) {
	allowed := packageMap(t)
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := relPackage(p.ImportPath)
		seen[name] = true
		rules, ok := allowed[name]
		if !ok {
			t.Errorf("package %s is missing from the map in doc.go (# Packages)", name)
			continue
		}
		for _, imp := range p.Imports {
			if imp != modulePath && !strings.HasPrefix(imp, modulePath+"/") {
				continue
			}
			if dep := relPackage(imp); !allows(rules, dep) {
				t.Errorf("%s imports %s, which its entry in doc.go's map does not allow (> %s)", name, dep, strings.Join(rules, " "))
			}
		}
	}
	for name := range allowed {
		if !seen[name] {
			t.Errorf("doc.go's map names %s, which is not a package of the module", name)
		}
	}
}

// The map's own reading: patterns and an entry that breaks the format.
func TestLayeringPatterns(t *testing.T) {
	for _, c := range []struct {
		rules []string
		dep   string
		want  bool
	}{
		{[]string{"reconf"}, "reconf", true},
		{[]string{"reconf"}, "source", false},
		{[]string{"-"}, "reconf", false},
		{[]string{"..."}, "internal/gateway", true},
		{[]string{"propagate/..."}, "propagate", true},
		{[]string{"propagate/..."}, "propagate/embedded", true},
		{[]string{"propagate/..."}, "propagatex", false},
		{[]string{"internal/..."}, "internal/safefile", true},
		{[]string{"internal/..."}, "cmd/reconfd/internal/earlysignal", false},
	} {
		if got := allows(c.rules, c.dep); got != c.want {
			t.Errorf("allows(%v, %s) = %v, want %v", c.rules, c.dep, got, c.want)
		}
	}
}

// relPackage names a package of the module as the map does.
func relPackage(importPath string) string {
	if importPath == modulePath {
		return "reconf"
	}
	return strings.TrimPrefix(importPath, modulePath+"/")
}

func allows(rules []string, dep string) bool {
	for _, r := range rules {
		switch {
		case r == "...":
			return true
		case strings.HasSuffix(r, "/..."):
			base := strings.TrimSuffix(r, "/...")
			if dep == base || strings.HasPrefix(dep, base+"/") {
				return true
			}
		case r == dep:
			return true
		}
	}
	return false
}

// packageMap reads doc.go's map: an entry is a line of its code block
// that starts with a package path, and the line after it, starting with
// ">", lists what that package may import.
func packageMap(t *testing.T) map[string][]string {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "// # Packages\n")
	if !ok {
		t.Fatal(`doc.go has no "# Packages" section`)
	}
	section, _, _ = strings.Cut(section, "\npackage ")
	m := map[string][]string{}
	last := ""
	for line := range strings.Lines(section) {
		body, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "//\t")
		if !ok {
			continue
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(body), ">"); ok {
			if last == "" || m[last] != nil {
				t.Fatalf("doc.go's map: %q follows no package line", body)
			}
			m[last] = strings.Fields(rest)
			continue
		}
		if last != "" && m[last] == nil {
			t.Fatalf("doc.go's map: %s has no import line (> ...)", last)
		}
		last = strings.Fields(body)[0]
		if _, dup := m[last]; dup {
			t.Fatalf("doc.go's map: %s is listed twice", last)
		}
		m[last] = nil
	}
	if last != "" && m[last] == nil {
		t.Fatalf("doc.go's map: %s has no import line (> ...)", last)
	}
	return m
}
