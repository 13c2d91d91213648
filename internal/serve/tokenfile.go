package serve

import (
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// tokenRotator re-reads the management token file (admin.EnvTokenFile) on
// every reload of this process's configuration, whatever its outcome and
// whoever triggered it (SIGHUP, the API, a version published by another
// worker), and hands a changed token to the management server: the old
// token stops working at once. A file that cannot be read keeps the old
// token, with an error logged. A process has one management server, so
// one rotator.
type tokenRotator struct {
	bound atomic.Pointer[boundToken]
}

type boundToken struct {
	srv  *admin.Server
	path string
	log  *slog.Logger
	last atomic.Pointer[[]admin.Token]
}

var managementToken tokenRotator

// bind starts rotating srv's token from path.
func (r *tokenRotator) bind(srv *admin.Server, path string, current []admin.Token, log *slog.Logger) {
	b := &boundToken{srv: srv, path: path, log: log}
	b.last.Store(&current)
	r.bound.Store(b)
}

// observe is a reconf observer: it runs after every attempt.
func (r *tokenRotator) observe(res reconf.Result) {
	b := r.bound.Load()
	if b == nil || res.DryRun || res.Trigger == reconf.TriggerStartup || res.Trigger == reconf.TriggerCheck {
		return
	}
	toks, err := admin.ReadTokenFile(b.path)
	if err == nil && sameTokens(toks, *b.last.Load()) {
		return
	}
	if err == nil {
		err = b.srv.SetTokens(toks...)
	}
	if err != nil {
		b.log.Error("management token file could not be re-read; the previous tokens stay valid", "path", b.path, "error", err)
		return
	}
	b.last.Store(&toks)
	b.log.Info("management token rotated from its file; a token no longer listed no longer works", "path", b.path, "tokens", len(toks))
}

// sameTokens reports whether two token lists are equal, names and order
// included.
func sameTokens(a, b []admin.Token) bool {
	return slices.EqualFunc(a, b, func(x, y admin.Token) bool { return x.Name == y.Name && x.Secret.Equal(y.Secret) })
}
