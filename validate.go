package reconf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Validator is implemented by a configuration type (or any struct inside
// it) that has invariants spanning several fields. Validate is called after
// decoding, overrides, defaults and Normalize. Its error should name fields
// by path (see FieldError) and must never quote values.
type Validator interface {
	Validate() error
}

// ContextValidator is a Validator that needs the attempt: a check of the
// content of the files that its `reconf:",file"` or `reconf:",hostfile"`
// fields name (a certificate that must parse and match its key). ctx
// carries the attempt, so FileContent(ctx, name) returns the bytes the
// attempt read and digested, the same that Prepare will get; the check
// must honour ctx and never quote file content. It is called where
// Validate would be, and a type may implement both.
type ContextValidator interface {
	ValidateContext(ctx context.Context) error
}

// Normalizer is implemented by a configuration type that computes derived
// fields or canonicalizes aliases before validation.
type Normalizer interface {
	Normalize()
}

// FieldError is a validation failure of one field, returned by a Validate
// method so that reconf can add the YAML line and column.
type FieldError struct {
	Path   string // e.g. "routing.default_route"
	Detail string // safe text; never the value
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Detail }

// FieldErrorf returns a *FieldError for path. The arguments must not carry
// configuration content.
func FieldErrorf(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Detail: fmt.Sprintf(format, args...)}
}

// Rules are written in a `validate` tag; the grammar is in doc.go (# Tags).
// Each is parsed once, for its field's type, when the schema is built.

// ruleNames lists the rules, for the error that names an unknown one.
const ruleNames = "required, min, max, oneof"

// rule is one declarative check from a `validate` tag, parsed once for the
// field's type.
type rule struct {
	op     string // required, min, max, oneof
	text   string // the argument as written: safe, it is the program's
	length bool   // min/max bound a length
	i      int64
	u      uint64
	f      float64
	words  []string
}

// ruleTarget is the shape a rule checks: a pointer's target.
func ruleTarget(sh *shape) *shape {
	if sh.kind == kPointer {
		return sh.elem.shape
	}
	return sh
}

// parseRules parses a validate tag for a field of shape sh.
func parseRules(tag string, sh *shape) ([]rule, error) {
	if tag == "" {
		return nil, nil
	}
	var out []rule
	t := ruleTarget(sh)
	for _, part := range strings.Split(tag, ",") {
		op, arg, _ := strings.Cut(part, "=")
		r := rule{op: op, text: arg}
		switch op {
		case "required":
			if sh.kind != kPointer && !hasLength(t) && t.kind != kSecret && t.kind != kText {
				return nil, fmt.Errorf("required cannot apply to %s: an explicit zero is a value; use min, oneof or a pointer", t.typ)
			}
		case "min", "max":
			if err := r.parseBound(t, arg); err != nil {
				return nil, err
			}
		case "oneof":
			r.words = strings.Fields(arg)
			if len(r.words) == 0 {
				return nil, fmt.Errorf("oneof needs values")
			}
			if t.kind != kScalar || t.typ.Kind() == reflect.Bool || t.typ.Kind() == reflect.Float32 || t.typ.Kind() == reflect.Float64 {
				return nil, fmt.Errorf("oneof cannot apply to %s; it takes strings and integers", t.typ)
			}
			for _, w := range r.words {
				if _, err := parseText(t, w); err != nil {
					return nil, fmt.Errorf("oneof: a word does not fit %s: %v", t.typ, err)
				}
			}
		default:
			return nil, fmt.Errorf("unknown rule %q; valid rules: %s", op, ruleNames)
		}
		out = append(out, r)
	}
	return out, nil
}

// hasLength reports whether min and max bound a length for sh.
func hasLength(sh *shape) bool {
	switch sh.kind {
	case kList, kArray, kMap:
		return true
	case kScalar:
		return sh.typ.Kind() == reflect.String
	}
	return false
}

// parseBound parses min's or max's argument exactly, in the field's own
// terms: an integer for integers, a duration for durations.
func (r *rule) parseBound(t *shape, arg string) error {
	var err error
	switch {
	case hasLength(t):
		r.length = true
		var n uint64
		if n, err = parseUint(arg, 63); err == nil {
			r.i = int64(n)
		}
	case t.kind == kDuration:
		r.i, err = parseDuration(arg)
	case t.kind == kScalar:
		switch t.typ.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			r.i, err = parseInt(arg, 64)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			r.u, err = parseUint(arg, 64)
		case reflect.Float32, reflect.Float64:
			r.f, err = parseFloat(arg, 64)
		default:
			return fmt.Errorf("%s cannot apply to %s; it takes numbers, durations, strings, lists and maps", r.op, t.typ)
		}
	default:
		return fmt.Errorf("%s cannot apply to %s; it takes numbers, durations, strings, lists and maps", r.op, t.typ)
	}
	if err != nil {
		return fmt.Errorf("%s: the bound does not fit %s: %v", r.op, t.typ, err)
	}
	return nil
}

// check returns a safe description of why v (of shape sh) breaks r, or "".
func (r *rule) check(sh *shape, v reflect.Value) string {
	if sh.kind == kPointer {
		if v.IsNil() {
			if r.op == "required" {
				return "is required"
			}
			return ""
		}
		sh, v = sh.elem.shape, v.Elem()
	}
	switch r.op {
	case "required":
		if v.IsZero() || (sh.kind == kSecret && v.Interface().(Secret).IsZero()) {
			return "is required"
		}
	case "min", "max":
		return r.bound(sh, v)
	case "oneof":
		s := leafString(v)
		for _, w := range r.words {
			if s == w {
				return ""
			}
		}
		return "must be one of: " + strings.Join(r.words, ", ")
	}
	return ""
}

func (r *rule) bound(sh *shape, v reflect.Value) string {
	var c int // v compared with the bound
	switch {
	case r.length:
		c = cmp.Compare(int64(v.Len()), r.i)
	case sh.kind == kDuration:
		c = cmp.Compare(v.Int(), r.i)
	default:
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			c = cmp.Compare(v.Int(), r.i)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			c = cmp.Compare(v.Uint(), r.u)
		default:
			c = cmp.Compare(v.Float(), r.f)
		}
	}
	switch {
	case r.op == "min" && c < 0 && r.length:
		return fmt.Sprintf("must have at least %s elements or characters", r.text)
	case r.op == "max" && c > 0 && r.length:
		return fmt.Sprintf("must have at most %s elements or characters", r.text)
	case r.op == "min" && c < 0:
		return "must be at least " + r.text
	case r.op == "max" && c > 0:
		return "must be at most " + r.text
	}
	return ""
}

// checker is the validation visitor: the rules of each field, unique keys
// in keyed lists, and Validate methods (after the fields they span).
type checker struct {
	ctx   context.Context // the attempt, for ContextValidator; never nil
	probs []Problem
}

func (c *checker) walker() *walker {
	return &walker{mask: fCheck, sorted: true, enter: c.enter, leave: c.leave}
}

func (c *checker) enter(w *walker, n *node, v reflect.Value) bool {
	for i := range n.rules {
		if msg := n.rules[i].check(n.shape, v); msg != "" {
			c.probs = append(c.probs, Problem{Path: w.path(), Detail: msg})
		}
	}
	if n.kind == kList && n.key >= 0 {
		c.uniqueKeys(w, n, v)
	}
	return true
}

func (c *checker) uniqueKeys(w *walker, n *node, v reflect.Value) {
	seen := make(map[string]struct{}, v.Len())
	for i := range v.Len() {
		k := n.keyOf(v.Index(i))
		if k == "" {
			continue
		}
		if _, dup := seen[k]; dup {
			c.probs = append(c.probs, Problem{Path: w.path() + "[" + safeSegment(k) + "]", Detail: "duplicate name in list"})
		}
		seen[k] = struct{}{}
	}
}

func (c *checker) leave(w *walker, n *node, v reflect.Value) {
	if !n.validator || n.kind != kStruct {
		return
	}
	x := v.Interface()
	if v.CanAddr() {
		x = v.Addr().Interface()
	}
	if val, ok := x.(Validator); ok {
		c.probs = append(c.probs, validatorProblems(val.Validate, w.path())...)
	}
	if val, ok := x.(ContextValidator); ok {
		c.probs = append(c.probs, validatorProblems(func() error { return val.ValidateContext(c.ctx) }, w.path())...)
	}
}

// validatorProblems runs a Validate method; field paths it reports are
// relative to the struct it was called on.
func validatorProblems(validate func() error, path string) (out []Problem) {
	defer func() {
		if p := recover(); p != nil {
			out = []Problem{{Path: path, Detail: "Validate panicked"}}
		}
	}()
	err := validate()
	if err == nil {
		return nil
	}
	collectProblems(err, path, &out)
	return out
}

// collectProblems flattens joined errors; a *FieldError keeps its path.
func collectProblems(err error, path string, out *[]Problem) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectProblems(e, path, out)
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		*out = append(*out, Problem{Path: joinPath(path, fe.Path), Detail: fe.Detail})
		return
	}
	*out = append(*out, Problem{Path: path, Detail: err.Error()})
}
