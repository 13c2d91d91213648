// Package redact removes the credentials of URL-like text before a
// command prints it. A URL can carry a password (user:password@host), and
// a malformed one (no scheme, "http:" without "//", a space in the
// password) is still one an operator typed: every message that quotes a
// command-line value must print neither.
//
// Two passes cover that: a Redactor knows the URL-like values the command
// was given (its arguments and the environment variables it reads) and
// removes their credential part wherever it shows, however it is quoted;
// then a pattern removes the credentials of anything else that looks like
// user:password@host.
package redact

import (
	"regexp"
	"strconv"
	"strings"
)

// Mask replaces a URL's credentials.
const Mask = "REDACTED"

// Redactor removes known credentials from text. The zero Redactor removes
// only what the pattern finds. It is safe for concurrent use once built.
type Redactor struct {
	creds []string // credential parts of the given values, longest first
}

// New returns a Redactor for the values a command was given: each
// argument (the value of a --flag=value too) and each environment value
// that looks like a URL with credentials contributes its credential part.
func New(values ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	add := func(c string) {
		if c != "" && !seen[c] {
			seen[c] = true
			r.creds = append(r.creds, c)
		}
	}
	for _, v := range values {
		if strings.HasPrefix(v, "-") {
			if _, after, ok := strings.Cut(v, "="); ok {
				v = after
			}
		}
		add(credential(v))
		for part := range strings.SplitSeq(v, ",") {
			add(credential(part))
		}
	}
	// Longest first, so that a credential containing another is removed
	// whole.
	for i := 1; i < len(r.creds); i++ {
		for j := i; j > 0 && len(r.creds[j]) > len(r.creds[j-1]); j-- {
			r.creds[j], r.creds[j-1] = r.creds[j-1], r.creds[j]
		}
	}
	return r
}

// scheme matches a URL's scheme with or without "//".
var scheme = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*:(//)?`)

// credential returns the credential part of a URL-like value: what lies
// between its scheme (if any) and its last '@', when that holds a ':' (a
// password) or the value has a scheme. Anything else returns "".
func credential(v string) string {
	at := strings.LastIndexByte(v, '@')
	if at <= 0 {
		return ""
	}
	head := v[:at]
	loc := scheme.FindStringIndex(head)
	switch {
	case loc != nil && loc[1] < len(head):
		return head[loc[1]:]
	case loc == nil && strings.Contains(head, ":"):
		return strings.TrimSpace(head)
	}
	return ""
}

// userinfo matches what looks like the credentials of a URL: an optional
// scheme (with or without "//"), then a run without spaces or quotes that
// holds a ':' (user:password) or follows "://", up to an '@'. A password
// may hold spaces (user:pa ss@host): after user:password, up to three
// more words without ':', '/' or '@' may come before the '@'; more would
// be a sentence, not a password.
var userinfo = regexp.MustCompile(
	`([A-Za-z][A-Za-z0-9+.-]*://)[^\s"'` + "`" + `/@]*:[^\s"'` + "`" + `@]*(?: [^\s"'` + "`" + `:/@]+){1,3}@` +
		`|([A-Za-z][A-Za-z0-9+.-]*://)[^\s"'` + "`" + `]*@` +
		`|([A-Za-z][A-Za-z0-9+.-]*:)?[^\s"'` + "`" + `:@/]*:[^\s"'` + "`" + `@]*(?: [^\s"'` + "`" + `:/@]+){0,3}@`)

// String returns s with every known credential and every URL-like
// credential replaced by Mask.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, c := range r.creds {
			s = strings.ReplaceAll(s, c, Mask)
			if q := strconv.Quote(c); q[1:len(q)-1] != c {
				s = strings.ReplaceAll(s, q[1:len(q)-1], Mask)
			}
		}
	}
	return userinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfo.FindStringSubmatch(m)
		for _, scheme := range sub[1:] {
			if scheme != "" {
				return scheme + Mask + "@"
			}
		}
		return Mask + "@"
	})
}

// URLs is String of the zero Redactor: it removes what looks like a URL's
// credentials.
func URLs(s string) string { return (*Redactor)(nil).String(s) }
