//go:build ignore

// Apicount prints the exported names of every public package of the
// module: top-level types, functions, variables and constants, plus the
// exported methods of exported types, per package and in total. A public
// package is one a library user can import: not internal, not a command,
// not a test-only package (e2e), not the separate bench module.
//
//	go run scripts/apicount.go        # one line a package
//	go run scripts/apicount.go -names # and every name
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	names := flag.Bool("names", false, "print every exported name under its package")
	flag.Parse()
	pkgs, err := publicPackages()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	total := 0
	for _, p := range pkgs {
		set, err := exported(p.Dir, p.files())
		if err != nil {
			fmt.Fprintln(os.Stderr, "apicount:", err)
			os.Exit(1)
		}
		top, methods := 0, 0
		for n := range set {
			if strings.Contains(n, ".") {
				methods++
			} else {
				top++
			}
		}
		total += len(set)
		fmt.Printf("%-45s %4d  (%d top-level, %d methods)\n", p.ImportPath, len(set), top, methods)
		if *names {
			list := make([]string, 0, len(set))
			for n, kind := range set {
				list = append(list, kind+" "+n)
			}
			sort.Strings(list)
			for _, n := range list {
				fmt.Println("\t" + n)
			}
		}
	}
	fmt.Printf("%-45s %4d\n", "total", total)
}

type pkg struct {
	ImportPath     string
	Dir            string
	Name           string
	GoFiles        []string
	IgnoredGoFiles []string
}

// files includes the files excluded on this platform by build tags, so
// that a name declared only for Windows counts too.
func (p pkg) files() []string {
	var out []string
	for _, f := range append(append([]string{}, p.GoFiles...), p.IgnoredGoFiles...) {
		if !strings.HasSuffix(f, "_test.go") {
			out = append(out, f)
		}
	}
	return out
}

func publicPackages() ([]pkg, error) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		if p.Name == "main" || strings.Contains(p.ImportPath, "/internal/") ||
			strings.HasSuffix(p.ImportPath, "/internal") ||
			strings.Contains(p.ImportPath, "/e2e") || len(p.GoFiles) == 0 {
			continue
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// exported maps each exported name ("Name" or "Type.Method") to its kind.
func exported(dir string, files []string) (map[string]string, error) {
	fset := token.NewFileSet()
	set := map[string]string{}
	for _, f := range files {
		file, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					set[d.Name.Name] = "func"
					continue
				}
				recv := receiverName(d.Recv.List[0].Type)
				if ast.IsExported(recv) {
					set[recv+"."+d.Name.Name] = "method"
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							set[s.Name.Name] = "type"
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								set[n.Name] = strings.ToLower(d.Tok.String())
							}
						}
					}
				}
			}
		}
	}
	return set, nil
}

func receiverName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
