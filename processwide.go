package reconf

import (
	"fmt"
	"slices"
	"strings"
)

// WithProcessWide declares fields that one process cannot hold two values
// of at once, so that a rollout cannot split them by request: a
// listener's TLS certificate, the log level, a limit enforced across all
// requests. A rollout (Runtime.Stage) whose candidate changes a field at
// or under one of paths is refused as invalid /
// rollout_field_not_splittable, naming the fields; the change is
// published with Reload (or a strategy that is all_at_once with no bake),
// on its own or with the rest. Reload is not affected. A path may name a
// list element's field for every element ("backends[*].max_concurrency").
// Every path must name a field of the configuration type (see
// ErrUnknownPath). The option may be given more than once.
func WithProcessWide(paths ...string) Option {
	return func(o *settings) { o.processWide = append(o.processWide, paths...) }
}

// unsplittable returns the changed paths a rollout cannot split.
func unsplittable(changes []fieldChange, declared []string) []string {
	if len(declared) == 0 {
		return nil
	}
	types := make([]string, len(declared))
	for i, p := range declared {
		types[i] = typePath(p)
	}
	var out []string
	for _, c := range changes {
		if underAny(typePath(c.Path), types) {
			out = append(out, c.Path)
		}
	}
	slices.Sort(out)
	return out
}

// notSplittable is the refusal of a rollout that changes process-wide
// fields.
func notSplittable(paths []string) *Error {
	e := &Error{Reason: ReasonNotSplittable, Message: fmt.Sprintf(
		"%d changed field(s) are process-wide and cannot be rolled out by request (%s); publish them without a rollout, then stage the rest",
		len(paths), strings.Join(paths[:min(len(paths), maxListedPaths)], ", "))}
	for _, p := range paths {
		e.Problems = append(e.Problems, Problem{Path: p, Detail: "process-wide: one value for every request"})
	}
	return e
}
