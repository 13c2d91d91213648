package serve

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/exitcode"
)

// ManagementTLS are serve's flags for the management listener's TLS; each
// overrides its environment variable.
type ManagementTLS struct {
	Cert, Key, ClientCA, ClientAuth string
}

// apply overrides cfg's TLS settings with the flags that are set.
func (f ManagementTLS) apply(cfg *admin.Config) error {
	for p, v := range map[*string]string{&cfg.TLS.CertFile: f.Cert, &cfg.TLS.KeyFile: f.Key, &cfg.TLS.ClientCAFile: f.ClientCA} {
		if v != "" {
			*p = v
		}
	}
	if f.ClientAuth != "" {
		m, err := admin.ParseClientAuth(f.ClientAuth)
		if err != nil {
			return exitcode.Usagef("--management-client-auth must be either or both")
		}
		cfg.TLS.ClientAuth = m
	}
	return nil
}

// loadManagementTLS reads the TLS files for the start of management.
func loadManagementTLS(t admin.TLSFiles) (*admin.TLS, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return t.Load(ctx)
}

// tlsRotator re-reads the management listener's TLS files on every
// reload of this process's configuration, whatever its outcome and
// whoever triggered it, as tokenRotator does the token file: a changed
// certificate or client CA bundle reaches the next handshake; files that
// cannot be used keep the current ones, with an error logged.
type tlsRotator struct {
	bound atomic.Pointer[boundTLS]
}

type boundTLS struct {
	srv   *admin.Server
	files admin.TLSFiles
	log   *slog.Logger
	last  atomic.Pointer[admin.TLS]
}

var managementTLS tlsRotator

func (r *tlsRotator) bind(srv *admin.Server, files admin.TLSFiles, current *admin.TLS, log *slog.Logger) {
	b := &boundTLS{srv: srv, files: files, log: log}
	b.last.Store(current)
	r.bound.Store(b)
}

// observe is a reconf observer: it runs after every attempt.
func (r *tlsRotator) observe(res reconf.Result) {
	b := r.bound.Load()
	if b == nil || res.DryRun || res.Trigger == reconf.TriggerStartup || res.Trigger == reconf.TriggerCheck {
		return
	}
	t, err := loadManagementTLS(b.files)
	if err == nil && sameTLS(t, b.last.Load()) {
		return
	}
	if err == nil {
		err = b.srv.SetTLS(t)
	}
	if err != nil {
		b.log.Error("management TLS files could not be re-read; the current certificate stays", "error", err)
		return
	}
	b.last.Store(t)
	b.log.Info("management TLS files re-read: new handshakes use them", "cert_file", b.files.CertFile, "subject", t.Cert.Leaf.Subject.String(),
		"not_after", t.Cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

// sameTLS reports whether a and b hold the same certificate chain, key
// and client CAs.
func sameTLS(a, b *admin.TLS) bool {
	if a == nil || b == nil || len(a.Cert.Certificate) != len(b.Cert.Certificate) || a.ClientAuth != b.ClientAuth {
		return false
	}
	for i := range a.Cert.Certificate {
		if !bytes.Equal(a.Cert.Certificate[i], b.Cert.Certificate[i]) {
			return false
		}
	}
	if (a.ClientCAs == nil) != (b.ClientCAs == nil) || (a.ClientCAs != nil && !a.ClientCAs.Equal(b.ClientCAs)) {
		return false
	}
	// The same certificate with another key cannot pass Load's match check.
	return true
}
