package certfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseRefusals: each way a pair is unusable is refused with the file
// it concerns named, and never with the file's content.
func TestParseRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	cert, key := ca.Issue("server")
	_, otherKey := ca.Issue("other")
	old, oldKey := ca.IssueValid("old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	canary := "-----BEGIN CERTIFICATE-----\nY2FuYXJ5LWNvbnRlbnQ=\n-----END CERTIFICATE-----\n"
	rsaKey := "-----BEGIN RSA PRIVATE KEY-----\nY2FuYXJ5LWNvbnRlbnQ=\n-----END RSA PRIVATE KEY-----\n"
	now := time.Now()

	if c, err := Parse(read(t, cert), read(t, key), cert, key, now); err != nil || c.Leaf == nil || c.Leaf.Subject.CommonName != "server" {
		t.Fatalf("a good pair: %v", err)
	}
	for name, tc := range map[string]struct {
		cert, key []byte
		which     Which
		want      string
	}{
		"no PEM":         {[]byte("canary-content"), read(t, key), Cert, "holds no PEM certificate"},
		"bad DER":        {[]byte(canary), read(t, key), Cert, "does not parse"},
		"key file empty": {read(t, cert), nil, Key, "holds no PEM private key"},
		"bad key DER":    {read(t, cert), []byte(rsaKey), Key, "the private key does not parse"},
		"mismatch":       {read(t, cert), read(t, otherKey), Key, "does not match the certificate in cert.pem"},
		"expired":        {read(t, old), read(t, oldKey), Cert, "expired at"},
		"key not a cert": {read(t, key), read(t, key), Cert, "holds no PEM certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.cert, tc.key, "cert.pem", "key.pem", now)
			var e *Error
			if !errors.As(err, &e) || e.Which != tc.which || !strings.Contains(e.Detail, tc.want) {
				t.Fatalf("got %v, want a refusal of %d containing %q", err, tc.which, tc.want)
			}
			file := map[Which]string{Cert: "cert.pem", Key: "key.pem"}[tc.which]
			if !strings.Contains(err.Error(), file) {
				t.Fatalf("%q does not name %s", err, file)
			}
			if strings.Contains(err.Error(), "Y2FuYXJ5") || strings.Contains(err.Error(), "canary") {
				t.Fatalf("%q quotes content", err)
			}
		})
	}
}

// TestReadRefusesHostileFiles: a FIFO, /dev/zero and a missing file are
// refused at once, naming the file.
func TestReadRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	cert, key := ca.Issue("server")
	fifo, zero := testkit.HostileFiles(t, dir)
	for name, tc := range map[string]struct {
		cert, key string
		which     Which
	}{
		"fifo cert":    {fifo, key, Cert},
		"zero key":     {cert, zero, Key},
		"missing cert": {filepath.Join(dir, "absent.pem"), key, Cert},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := Read(ctx, tc.cert, tc.key, time.Now())
			var e *Error
			if !errors.As(err, &e) || e.Which != tc.which || ctx.Err() != nil {
				t.Fatalf("got %v", err)
			}
		})
	}
	if c, err := Read(context.Background(), cert, key, time.Now()); err != nil || c == nil {
		t.Fatalf("a good pair: %v", err)
	}
}

// TestReadPool: a CA bundle reads into a pool; a file that is missing, a
// FIFO, a device or not PEM is refused naming the file, never quoting it.
func TestReadPool(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	if pool, err := ReadPool(context.Background(), ca.File); err != nil || pool == nil {
		t.Fatalf("a CA bundle: %v", err)
	}
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("canary-content"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo, _ := testkit.HostileFiles(t, dir)
	for _, f := range []string{filepath.Join(dir, "none"), fifo, "/dev/zero", garbage} {
		_, err := ReadPool(context.Background(), f)
		if err == nil || !strings.Contains(err.Error(), f) || strings.Contains(err.Error(), "canary") {
			t.Errorf("%s: %v", f, err)
		}
	}
}
