package redact

import (
	"fmt"
	"strings"
	"testing"
)

// TestMalformedURLs: a password never survives, whatever shape its URL
// has and however the message quotes it.
func TestMalformedURLs(t *testing.T) {
	const pw = "S3cr3tpw"
	tests := []struct{ name, arg string }{
		{"well formed", "http://user:" + pw + "@host:2379"},
		{"no scheme", "user:" + pw + "@host:2379"},
		{"scheme without slashes", "http:user:" + pw + "@host:2379"},
		{"space in the password", "http://user:" + pw + " x@host:2379"},
		{"space, no scheme", "user:" + pw + " x@host:2379"},
		{"quote in the password", `http://user:` + pw + `"x@host:2379`},
		{"at sign in the password", "http://user:" + pw + "@x@host:2379"},
		{"slash in the password", "http://user:" + pw + "/x@host:2379"},
		{"second of a list", "http://a:2379,https://user:" + pw + "@host:2379"},
		{"percent escape", "https://user:" + pw + "%zz@host:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New("serve", "--config", "/etc/reconfd.yaml", "--cluster", tt.arg)
			rEq := New("serve", "--cluster="+tt.arg)
			msgs := []string{
				fmt.Sprintf("--cluster %q: must be an etcd client URL", tt.arg),
				"--cluster " + tt.arg + ": must name a host and port",
				fmt.Sprintf("parse %q: net/url: invalid userinfo", tt.arg),
			}
			for _, m := range msgs {
				for _, got := range []string{r.String(m), rEq.String(m)} {
					if strings.Contains(got, pw) {
						t.Errorf("the password survives: %s", got)
					}
					if !strings.Contains(got, Mask) {
						t.Errorf("nothing redacted: %s", got)
					}
				}
			}
		})
	}
}

// TestPatternAlone: without the arguments, the pattern still removes the
// credentials of URL-like text, a password with a space or two included.
func TestPatternAlone(t *testing.T) {
	tests := map[string]string{
		`--cluster "http://user:pw@host:2379": bad`:         `--cluster "http://REDACTED@host:2379": bad`,
		`--cluster "user:pw@host:2379": bad`:                `--cluster "REDACTED@host:2379": bad`,
		`--cluster "http:user:pw@host:2379": bad`:           `--cluster "http:REDACTED@host:2379": bad`,
		`etcd://a/b@host`:                                   `etcd://REDACTED@host`,
		`cluster endpoint user:pa ss@host:2379: bad`:        `cluster endpoint REDACTED@host:2379: bad`,
		`cluster endpoint http://user:pa ss@host:2379: bad`: `cluster endpoint http://REDACTED@host:2379: bad`,
		`cluster endpoint http:user:pa s s@host:2379: bad`:  `cluster endpoint http:REDACTED@host:2379: bad`,
	}
	for in, want := range tests {
		if got := URLs(in); got != want {
			t.Errorf("URLs(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLeavesTheRest: text without credentials is printed as it is.
func TestLeavesTheRest(t *testing.T) {
	r := New("serve", "--config", "/srv/a@b/reconfd.yaml", "--cluster", "http://127.0.0.1:2379", "--management-address", "127.0.0.1:9090")
	for _, s := range []string{
		`--cluster "http://127.0.0.1:2379": must not have a path`,
		`reading /srv/a@b/reconfd.yaml: no such file`,
		`listen tcp 127.0.0.1:9090: address already in use`,
		`actor api token alice@example.com`,
		`at 12:30:01: done`,
		`http://127.0.0.1:2379 is down; the four workers ask alice@example.com`,
	} {
		if got := r.String(s); got != s {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
}
