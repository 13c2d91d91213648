package reconf

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/testkit"
)

// hostConfig has a host-local file (a listener's certificate) whose
// content its own ValidateContext checks.
type hostConfig struct {
	Limits map[string]int `yaml:"limits" reconf:"live"`
	TLS    hostTLS        `yaml:"tls" reconf:"live"`
}

type hostTLS struct {
	Cert string `yaml:"cert_file" reconf:",hostfile"`
}

// ValidateContext refuses a certificate file that does not start with
// "CERT", reading it through FileContent as a listener would.
func (h *hostTLS) ValidateContext(ctx context.Context) error {
	if h.Cert == "" {
		return nil
	}
	data, err := FileContent(ctx, h.Cert)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return FieldErrorf("cert_file", "the file does not exist")
	case err != nil:
		return err
	case !bytes.HasPrefix(data, []byte("CERT")):
		return FieldErrorf("cert_file", "the file holds no certificate")
	}
	return nil
}

var writeFile = testkit.WriteAtomic

// TestHostFileStaysOnItsHost: a hostfile's digest is a change on the
// host whose file changed, is left out of the record, and a follower
// whose own file differs applies the version with its own file.
func TestHostFileStaysOnItsHost(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	certA, certB := filepath.Join(dirA, "cert.pem"), filepath.Join(dirB, "cert.pem")
	writeFile(t, certA, "CERT host a")
	writeFile(t, certB, "CERT host b")
	doc := func(cert string, limit string) string {
		return "limits:\n  stub: " + limit + "\ntls:\n  cert_file: " + cert + "\n"
	}
	ch := &faultChannel{}
	a, srcA := newRuntimeOn[hostConfig](t, ch, doc(certA, "1"))
	b, _ := newRuntimeOn[hostConfig](t, ch, doc(certB, "1"))

	// Only the file changed on host a: a change of tls.cert_file there.
	writeFile(t, certA, "CERT host a, rotated")
	res := mustReloadH(t, a, Published)
	if len(res.ChangedFields) != 1 || res.ChangedFields[0] != "tls.cert_file" {
		t.Fatalf("changed = %v, want [tls.cert_file]", res.ChangedFields)
	}
	v, rec := ch.current()
	if len(rec.Files) != 0 {
		t.Fatalf("the record carries a hostfile digest: %v", rec.Files)
	}
	// The record names certA, whose content b never compares with a's:
	// b applies the version, reading the file itself.
	if res, err := b.applyVersion(context.Background(), v, rec); err != nil || res.Outcome != Published {
		t.Fatalf("apply on a host whose certificate differs = %+v, %v", res, err)
	}

	// A file whose content its validator refuses is invalid at
	// validation, on a reload and on an apply alike, and the previous
	// generation stays.
	writeFile(t, certA, "garbage")
	res = mustReloadH(t, a, Invalid)
	if res.Reason != ReasonValidation || len(res.Problems) != 1 || res.Problems[0].Path != "tls.cert_file" {
		t.Fatalf("bad certificate: %+v", res)
	}
	// The certificate's path travels (a live field), its content does
	// not: b judges the file at that path on its own host. The test's
	// hosts share one file system, so b's host having a bad file is the
	// file going bad between a's publish and b's apply.
	srcA.set(doc(certA, "2"))
	writeFile(t, certA, "CERT host a again")
	mustReloadH(t, a, Published)
	writeFile(t, certA, "garbage")
	v, rec = ch.current()
	held := b.Current().ID()
	if res, _ := b.applyVersion(context.Background(), v, rec); res.Outcome != Invalid || res.Reason != ReasonValidation || b.Current().ID() != held {
		t.Fatalf("apply with a refused local certificate = %+v (held %d, now %d)", res, held, b.Current().ID())
	}
}

// TestContextValidatorAtStart: New refuses a configuration whose
// validator refuses a file, missing or not, naming the field.
func TestContextValidatorAtStart(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	writeFile(t, bad, "garbage")
	for name, path := range map[string]string{"missing": filepath.Join(dir, "absent.pem"), "refused": bad} {
		t.Run(name, func(t *testing.T) {
			_, err := New[hostConfig](context.Background(), newMem("tls:\n  cert_file: "+path+"\n"), WithLogger(discardLogger()))
			var e *Error
			if !errors.As(err, &e) || e.Reason != ReasonValidation || len(e.Problems) != 1 || e.Problems[0].Path != "tls.cert_file" || e.Problems[0].Line != 2 {
				t.Fatalf("New = %v, want validation_failed at tls.cert_file line 2", err)
			}
		})
	}
}

func newRuntimeOn[T any](t *testing.T, ch fleet.Channel, data string) (*Runtime[T], *memSource) {
	t.Helper()
	src := newMem(data)
	opts := []Option{WithLogger(discardLogger()), WithEnv(noEnv)}
	if ch != nil {
		opts = append(opts, withChannel(ch))
	}
	rt, err := New[T](context.Background(), src, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt, src
}

func mustReloadH(t *testing.T, rt *Runtime[hostConfig], want Outcome) Result {
	t.Helper()
	res, err := rt.Reload(context.Background(), TriggerSDK)
	if err != nil || res.Outcome != want {
		t.Fatalf("reload = %s (%s: %s) %v, want %s", res.Outcome, res.Reason, res.Message, err, want)
	}
	return res
}
