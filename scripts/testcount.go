//go:build ignore

// Testcount prints, for each package directory of the repository outside
// bench/, its tests (Test and Fuzz functions, TestMain aside) and its
// assertion sites (calls of Error, Errorf, Fatal, Fatalf with a message,
// and of Fail or FailNow on t, tb or b), then the totals. Run it before
// and after a change that moves tests, to see that none was lost.
//
//	go run scripts/testcount.go        # this tree
//	go run scripts/testcount.go DIR    # another checkout
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
)

type counts struct{ tests, asserts int }

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	byDir := map[string]*counts{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel == "bench" || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		c := byDir[filepath.Dir(rel)]
		if c == nil {
			c = &counts{}
			byDir[filepath.Dir(rel)] = c
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && isTest(fd.Name.Name) {
				c.tests++
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && isAssertion(call) {
				c.asserts++
			}
			return true
		})
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testcount:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var total counts
	fmt.Printf("%-40s %6s %8s\n", "package", "tests", "asserts")
	for _, d := range dirs {
		c := byDir[d]
		total.tests += c.tests
		total.asserts += c.asserts
		fmt.Printf("%-40s %6d %8d\n", d, c.tests, c.asserts)
	}
	fmt.Printf("%-40s %6d %8d\n", "total", total.tests, total.asserts)
}

// isTest reports whether name is a test or fuzz function go test runs.
func isTest(name string) bool {
	for _, p := range []string{"Test", "Fuzz"} {
		rest, ok := strings.CutPrefix(name, p)
		if ok && name != "TestMain" && (rest == "" || !unicode.IsLower(rune(rest[0]))) {
			return true
		}
	}
	return false
}

// isAssertion reports whether call fails a test: Error, Errorf, Fatal or
// Fatalf with arguments (err.Error() has none), or Fail or FailNow on the
// usual names of a testing.TB.
func isAssertion(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch sel.Sel.Name {
	case "Error", "Errorf", "Fatal", "Fatalf":
		return len(call.Args) > 0
	case "Fail", "FailNow":
		id, ok := sel.X.(*ast.Ident)
		return ok && (id.Name == "t" || id.Name == "tb" || id.Name == "b")
	}
	return false
}
