package reconf

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// ErrUnknownPath is wrapped by New when a path given to WithConsumer or
// WithProcessWide names no field of the configuration type. A typo
// there would silently switch the consumer off, so it is refused instead.
var ErrUnknownPath = errors.New("reconf: path names no field")

// maxSuggestions is how many nearest fields an unknown-path error names.
const maxSuggestions = 3

// checkRegistrations refuses every consumer and process-wide path that
// names no field of T, naming the nearest fields.
func checkRegistrations[T any](consumers []consumerReg[T], processWide []string) error {
	known := registrablePaths(fieldClasses(reflect.TypeFor[T]()))
	typ := reflect.TypeFor[T]().String()
	var errs []error
	check := func(who string, paths []string) {
		for _, p := range paths {
			if known[typePath(p)] {
				continue
			}
			near := ""
			if n := nearestPaths(typePath(p), known); len(n) > 0 {
				near = "; nearest: " + strings.Join(n, ", ")
			}
			errs = append(errs, fmt.Errorf("%w: %s: %q names no field of %s%s", ErrUnknownPath, who, p, typ, near))
		}
	}
	for _, c := range consumers {
		check(fmt.Sprintf("consumer %q", c.name), c.paths)
	}
	check("WithProcessWide", processWide)
	return errors.Join(errs...)
}

// registrablePaths returns every path a registration may name: each leaf
// path of the type and each of its ancestors ("backends",
// "backends[*]", "backends[*].timeout").
func registrablePaths(fields []pathClass) map[string]bool {
	out := map[string]bool{}
	for _, f := range fields {
		p := f.Path
		for p != "" {
			if out[p] {
				break
			}
			out[p] = true
			p = parentPath(p)
		}
	}
	return out
}

// parentPath drops the last segment of a path: "a.b" -> "a",
// "a[*]" -> "a", "a" -> "".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// typePath turns a value path into the type path it belongs to: every
// element selector ("backends[stub]", "routes[3]") becomes "[*]".
func typePath(p string) string {
	if !strings.Contains(p, "[") {
		return p
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(p, '[')
		if i < 0 {
			b.WriteString(p)
			return b.String()
		}
		j := strings.IndexByte(p[i:], ']')
		if j < 0 {
			b.WriteString(p)
			return b.String()
		}
		b.WriteString(p[:i])
		b.WriteString("[*]")
		p = p[i+j+1:]
	}
}

// nearestPaths returns the known paths closest to p by edit distance,
// nearest first, at most maxSuggestions of them.
func nearestPaths(p string, known map[string]bool) []string {
	type cand struct {
		path string
		d    int
	}
	var cs []cand
	for k := range known {
		cs = append(cs, cand{k, editDistance(p, k, math.MaxInt)})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.path, b.path)
	})
	var out []string
	for _, c := range cs[:min(len(cs), maxSuggestions)] {
		out = append(out, c.path)
	}
	return out
}
