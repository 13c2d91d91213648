package reconf_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMELibraryBlockBuilds compiles the README's library block
// verbatim as a program of its own, in a temporary module that replaces
// this one with the checkout, so the README cannot drift from the API. It
// costs one `go build` (a few seconds with a warm build cache).
func TestREADMELibraryBlockBuilds(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the README's block: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := libraryBlock(t, string(readme))

	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := "module readmecheck\n\ngo 1.26\n\nrequire github.com/reconfhq/reconf v0.0.0\n\nreplace github.com/reconfhq/reconf => " + root + "\n"
	for name, data := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": []byte(block)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goBin, "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	// The module's requirements come from the checkout's go.mod, resolved
	// from the module cache the checkout's own build filled: no network.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's library block does not build: %v\n%s", err, out)
	}
}

// libraryBlock returns the ```go block under "## The library in one screen".
func libraryBlock(t *testing.T, readme string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "## The library in one screen")
	if !ok {
		t.Fatal(`README.md has no "## The library in one screen" section`)
	}
	_, code, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("the library section has no ```go block")
	}
	code, _, ok = strings.Cut(code, "```")
	if !ok {
		t.Fatal("the library section's ```go block is not closed")
	}
	if !strings.HasPrefix(code, "package main") {
		t.Fatal("the library block must be a whole program (package main) so it can be built as written")
	}
	return code
}
