// Package termtext makes text safe to print on a terminal. What a server
// answers (an actor named after a certificate's subject, a worker's last
// error, a message) is chosen by whoever controls that server or that
// certificate; printed raw, an escape sequence in it can retitle the
// window, move the cursor to rewrite earlier lines, or hide text. Every
// command-line print of such text goes through Clean, one rune at a time.
package termtext

import (
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean returns s with every rune a terminal would act on instead of
// print replaced by its escaped form (ESC becomes \x1b): C0 controls
// except newline and tab, DEL, C1 controls, bidirectional overrides, and
// bytes that are not UTF-8 (\xff). Printable text, newlines and tabs are
// kept, so tables and multi-line answers keep their shape.
func Clean(s string) string {
	if !needsCleaning(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(hex(`\x`, uint64(s[i]), 2))
		case !safe(r) && r < 0x80:
			b.WriteString(hex(`\x`, uint64(r), 2))
		case !safe(r):
			b.WriteString(hex(`\u`, uint64(r), 4))
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needsCleaning reports whether s holds a rune Clean replaces.
func needsCleaning(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || !safe(r) {
			return true
		}
		i += n
	}
	return false
}

// hex writes v as prefix and digits hexadecimal digits.
func hex(prefix string, v uint64, digits int) string {
	h := strconv.FormatUint(v, 16)
	return prefix + strings.Repeat("0", max(digits-len(h), 0)) + h
}

// safe reports whether a terminal prints r as text.
func safe(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return true
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return false
	case unicode.Is(unicode.Bidi_Control, r):
		return false
	}
	return true
}

// Writer passes everything written to it through Clean. A Write must hold
// whole runes, as fmt and text/tabwriter write them; a rune split across
// two writes prints as its bytes' escapes.
type Writer struct{ w io.Writer }

// NewWriter returns a Writer over w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes Clean(p) and reports len(p) when it all went out.
func (w *Writer) Write(p []byte) (int, error) {
	s := Clean(string(p))
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
