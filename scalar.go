package reconf

import (
	"encoding"
	"errors"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Scalars are converted exactly or not at all: a YAML value, a default tag
// and an environment variable go through the same rules, so "0.9" never
// becomes 0 in an integer field, whichever layer wrote it. Error texts are
// fixed phrases; they never repeat the text.

var (
	errNotInteger = errors.New("want an integer (decimal, 0x or 0o)")
	errFraction   = errors.New("a fraction or exponent cannot go into an integer field")
	errLeadZero   = errors.New("an integer with a leading zero is ambiguous (octal?); write 0o10 or 10")
	errNegative   = errors.New("a negative number cannot go into an unsigned field")
	errNotNumber  = errors.New("want a number")
	errNaN        = errors.New("NaN is not a usable number")
	errNotBool    = errors.New("want true or false")
	errDuration   = errors.New("want a duration such as 30s or 1m30s")
	errDurFrac    = errors.New("a duration finer than a nanosecond cannot be held")
	errNotText    = errors.New("this field cannot be set from text")
)

func errRange(t reflect.Type) error { return errors.New("out of range for " + t.String()) }

// parseText converts text to a value of sh's type.
func parseText(sh *shape, text string) (reflect.Value, error) {
	v := reflect.New(sh.typ).Elem()
	return v, setText(sh, v, text)
}

// setText converts text into v, a settable value of sh's type; on error v
// is left as it was.
func setText(sh *shape, v reflect.Value, text string) error {
	t := sh.typ
	switch sh.kind {
	case kDuration:
		d, err := parseDuration(text)
		if err != nil {
			return err
		}
		v.SetInt(d)
		return nil
	case kSecret:
		b, err := parseSecret(text)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(Secret{b}))
		return nil
	case kText:
		x := reflect.New(t)
		u, ok := x.Interface().(encoding.TextUnmarshaler)
		if !ok {
			return errNotText
		}
		if err := u.UnmarshalText([]byte(text)); err != nil {
			return errors.New("not a valid " + t.String())
		}
		v.Set(x.Elem())
		return nil
	case kScalar:
	default:
		return errNotText
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(text)
	case reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return errNotBool
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := parseInt(text, t.Bits())
		if err != nil {
			return rangeFor(t, err)
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := parseUint(text, t.Bits())
		if err != nil {
			return rangeFor(t, err)
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := parseFloat(text, t.Bits())
		if err != nil {
			return rangeFor(t, err)
		}
		v.SetFloat(f)
	default:
		return errNotText
	}
	return nil
}

// errRangeMarker is what the number parsers return for a value out of
// range; rangeFor names the type in its place.
var errRangeMarker = errors.New("range")

func rangeFor(t reflect.Type, err error) error {
	if err == errRangeMarker {
		return errRange(t)
	}
	return err
}

// splitInt splits an integer's text into sign, digits and base, following
// YAML 1.2's core schema: [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+. A decimal
// with a leading zero is refused: YAML 1.1 read it as octal.
func splitInt(text string) (neg bool, digits string, base int, err error) {
	switch {
	case strings.HasPrefix(text, "0x"):
		digits, base = text[2:], 16
	case strings.HasPrefix(text, "0o"):
		digits, base = text[2:], 8
	default:
		digits, base = text, 10
		if digits != "" && (digits[0] == '+' || digits[0] == '-') {
			neg = digits[0] == '-'
			digits = digits[1:]
		}
	}
	if digits == "" {
		return false, "", 0, intSyntaxError(text)
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		ok := c >= '0' && c <= '9'
		if base == 8 {
			ok = c >= '0' && c <= '7'
		} else if base == 16 {
			ok = ok || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
		}
		if !ok {
			return false, "", 0, intSyntaxError(text)
		}
	}
	if base == 10 && len(digits) > 1 && digits[0] == '0' {
		return false, "", 0, errLeadZero
	}
	return neg, digits, base, nil
}

// intSyntaxError tells a number that is not an integer from text that is
// not a number at all.
func intSyntaxError(text string) error {
	if _, err := parseFloat(text, 64); err == nil || err == errRangeMarker || err == errNaN {
		return errFraction
	}
	return errNotInteger
}

func parseInt(text string, bits int) (int64, error) {
	neg, digits, base, err := splitInt(text)
	if err != nil {
		return 0, err
	}
	u, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return 0, errRangeMarker
	}
	limit := uint64(1) << (bits - 1)
	if neg {
		if u > limit {
			return 0, errRangeMarker
		}
		return int64(-u), nil // -(1<<63) wraps to itself, as it should
	}
	if u >= limit {
		return 0, errRangeMarker
	}
	return int64(u), nil
}

func parseUint(text string, bits int) (uint64, error) {
	neg, digits, base, err := splitInt(text)
	if err != nil {
		return 0, err
	}
	if neg {
		return 0, errNegative
	}
	u, err := strconv.ParseUint(digits, base, bits)
	if err != nil {
		return 0, errRangeMarker
	}
	return u, nil
}

// parseFloat reads YAML 1.2's core float forms ([-+]?(.digits|digits(.digits?)?)
// with an optional exponent, and [-+]?.inf). NaN is refused: it passes no
// comparison, so every rule would let it through. A value beyond the
// type's range is refused; rounding to the nearest float is not an error.
func parseFloat(text string, bits int) (float64, error) {
	body := text
	if body != "" && (body[0] == '+' || body[0] == '-') {
		body = body[1:]
	}
	switch body {
	case ".inf", ".Inf", ".INF":
		if text[0] == '-' {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	case ".nan", ".NaN", ".NAN":
		return 0, errNaN
	}
	mant, exp, hasExp := body, "", false
	if i := strings.IndexAny(body, "eE"); i >= 0 {
		mant, exp, hasExp = body[:i], body[i+1:], true
	}
	intPart, frac, hasDot := strings.Cut(mant, ".")
	if !allDigits(intPart) || !allDigits(frac) || intPart == "" && frac == "" {
		return 0, errNotNumber
	}
	if hasExp {
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		if exp == "" || !allDigits(exp) {
			return 0, errNotNumber
		}
	}
	if !hasDot && !hasExp && len(intPart) > 1 && intPart[0] == '0' {
		return 0, errLeadZero
	}
	f, err := strconv.ParseFloat(text, bits)
	if err != nil {
		return 0, errRangeMarker
	}
	return f, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// durationUnits are time.ParseDuration's units, in nanoseconds.
var durationUnits = map[string]int64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9,
}

// parseDuration reads what time.ParseDuration reads ("1h30m", "1.5s",
// "-2ms", "0"), exactly: a value that is not a whole number of
// nanoseconds, or beyond an int64 of them, is refused instead of being
// truncated or wrapped.
func parseDuration(text string) (int64, error) {
	if !strings.Contains(text, ".") {
		// Whole numbers of every unit: time.ParseDuration is exact and
		// refuses an overflow, so its answer stands; its errors are told
		// apart below.
		if d, err := time.ParseDuration(text); err == nil {
			return int64(d), nil
		}
	}
	s := text
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, errDuration
	}
	total := new(big.Rat)
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		num := s[:i]
		ip, fp, _ := strings.Cut(num, ".")
		if num == "" || strings.Count(num, ".") > 1 || ip == "" && fp == "" {
			return 0, errDuration
		}
		s = s[i:]
		j := 0
		for j < len(s) && (s[j] < '0' || s[j] > '9') && s[j] != '.' {
			j++
		}
		unit, ok := durationUnits[s[:j]]
		if !ok {
			return 0, errDuration
		}
		s = s[j:]
		r, ok := new(big.Rat).SetString(num)
		if !ok {
			return 0, errDuration
		}
		total.Add(total, r.Mul(r, new(big.Rat).SetInt64(unit)))
	}
	if !total.IsInt() {
		return 0, errDurFrac
	}
	n := total.Num()
	if neg {
		n.Neg(n)
	}
	if !n.IsInt64() {
		return 0, errRange(durationType)
	}
	return n.Int64(), nil
}
