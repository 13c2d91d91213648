//go:build ignore

// Longfuncs prints the longest functions and methods of the repository
// outside bench/, in lines from the func keyword to the closing brace.
//
//	go run scripts/longfuncs.go          # the five longest, tests excluded
//	go run scripts/longfuncs.go -n 20 -tests
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type fn struct {
	name  string
	pos   string
	lines int
}

func main() {
	n := flag.Int("n", 5, "how many to print")
	tests := flag.Bool("tests", false, "include _test.go files")
	flag.Parse()
	var fns []fn
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "bench" || path == ".git" || path == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !*tests && strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				name = recv(fd.Recv.List[0].Type) + "." + name
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			fns = append(fns, fn{f.Name.Name + "." + name, fmt.Sprintf("%s:%d", path, start.Line), end.Line - start.Line + 1})
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "longfuncs:", err)
		os.Exit(1)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].lines > fns[j].lines })
	for _, f := range fns[:min(*n, len(fns))] {
		fmt.Printf("%5d  %-40s %s\n", f.lines, f.name, f.pos)
	}
}

func recv(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "(*" + recv(t.X) + ")"
	case *ast.IndexExpr:
		return recv(t.X)
	case *ast.IndexListExpr:
		return recv(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
