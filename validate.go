package reconf

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Validator is implemented by a configuration type (or any struct inside
// it) that has invariants spanning several fields. Validate is called after
// decoding, overrides, defaults and Normalize. Its error should name fields
// by path (see FieldError) and must never quote values.
type Validator interface {
	Validate() error
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

// rule is one declarative check from a `validate` tag.
type rule struct {
	op    string // required, min, max, oneof
	num   float64
	dur   bool
	words []string
	text  string
}

// parseRules parses `validate:"required,min=1,max=64,oneof=a b c"`. Bounds
// on durations are durations ("min=1s"); on strings, slices and maps they
// bound the length.
func parseRules(tag string, t reflect.Type) ([]rule, error) {
	if tag == "" {
		return nil, nil
	}
	var out []rule
	for _, part := range strings.Split(tag, ",") {
		op, arg, _ := strings.Cut(part, "=")
		r := rule{op: op, text: arg}
		switch op {
		case "required":
		case "min", "max":
			if t == durationType {
				d, err := time.ParseDuration(arg)
				if err != nil {
					return nil, fmt.Errorf("%s: bad duration %q", op, arg)
				}
				r.num, r.dur = float64(d), true
			} else {
				f, err := strconv.ParseFloat(arg, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: bad number %q", op, arg)
				}
				r.num = f
			}
		case "oneof":
			r.words = strings.Fields(arg)
			if len(r.words) == 0 {
				return nil, fmt.Errorf("oneof needs values")
			}
		default:
			return nil, fmt.Errorf("unknown rule %q", op)
		}
		out = append(out, r)
	}
	return out, nil
}

// check returns a safe description of why v breaks r, or "".
func (r rule) check(v reflect.Value) string {
	switch r.op {
	case "required":
		if v.IsZero() || (v.Type() == secretType && v.Interface().(Secret).IsZero()) {
			return "is required"
		}
	case "min", "max":
		n, isLen := measure(v)
		if isLen {
			if r.op == "min" && n < r.num {
				return fmt.Sprintf("must have at least %s elements or characters", r.text)
			}
			if r.op == "max" && n > r.num {
				return fmt.Sprintf("must have at most %s elements or characters", r.text)
			}
			return ""
		}
		if r.op == "min" && n < r.num {
			return "must be at least " + r.text
		}
		if r.op == "max" && n > r.num {
			return "must be at most " + r.text
		}
	case "oneof":
		s := fmt.Sprint(v.Interface())
		for _, w := range r.words {
			if s == w {
				return ""
			}
		}
		return "must be one of: " + strings.Join(r.words, ", ")
	}
	return ""
}

func measure(v reflect.Value) (float64, bool) {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return float64(v.Len()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), false
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint()), false
	case reflect.Float32, reflect.Float64:
		return v.Float(), false
	}
	return 0, false
}

// parseScalar converts s (a default tag or an environment variable) to a
// value of type t.
func parseScalar(t reflect.Type, s string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	switch {
	case t == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return v, fmt.Errorf("not a duration")
		}
		v.SetInt(int64(d))
		return v, nil
	case t == secretType:
		b, err := parseSecret(s)
		if err != nil {
			return v, err
		}
		v.Set(reflect.ValueOf(Secret{b}))
		return v, nil
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return v, fmt.Errorf("not a boolean")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, t.Bits())
		if err != nil {
			return v, fmt.Errorf("not an integer of %d bits", t.Bits())
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, t.Bits())
		if err != nil {
			return v, fmt.Errorf("not an unsigned integer of %d bits", t.Bits())
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, t.Bits())
		if err != nil {
			return v, fmt.Errorf("not a number")
		}
		v.SetFloat(f)
	default:
		return v, fmt.Errorf("type %s cannot be set from text", t)
	}
	return v, nil
}
