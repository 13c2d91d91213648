package admin

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reconfhq/reconf"
)

// The status page's paths.
const (
	// PagePath serves the status page: server-rendered HTML, no external
	// asset, one small script for the auto-refresh.
	PagePath = "/admin/"
	// LoginPath takes the page's login form (POST, the token as "token").
	LoginPath = "/admin/login"
	// LogoutPath clears the page's session cookie (POST).
	LogoutPath = "/admin/logout"
)

// pageHistoryEntries is how many history entries the page shows.
const pageHistoryEntries = 15

// maxLoginBytes bounds a login form.
const maxLoginBytes = 4 << 10

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"join":    func(s []string) string { return strings.Join(s, ", ") },
	"applied": appliedSummary,
	"share":   sharePercent,
}).Parse(pageHTML))

func (s *Server) pageRoutes(mux *http.ServeMux) {
	mux.Handle("/admin/{$}", s.pageHandler())
	mux.Handle(LoginPath, s.handleWith(s.login, noCredential, []string{http.MethodPost}))
	mux.Handle(LogoutPath, s.handleWith(s.logout, noCredential, []string{http.MethodPost}))
}

// pageHandler serves the page behind the usual checks, a session standing
// in for the token; an unauthorized browser gets the login form instead
// of a JSON error. A browser's navigation carries the session's cookie
// but never its page key, so it gets the login form too: its script
// finds the key in sessionStorage and fetches the page with it.
func (s *Server) pageHandler() http.Handler {
	methods := []string{http.MethodGet, http.MethodHead}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := s.check(r, methods, tokenSession)
		switch {
		case errors.Is(err, errUnauthorized):
			err = s.renderLogin(w, r, http.StatusUnauthorized, "")
		case errors.Is(err, errMethod):
			w.Header().Set("Allow", "GET, HEAD")
		case err == nil:
			err = s.run(s.page, w, r)
		}
		if err != nil {
			s.answer(w, r, err)
		}
	})
}

// login checks the posted token and, when it is right, sets a session
// cookie and sends the browser to the page.
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	if !s.hasToken {
		http.Redirect(w, r, PagePath, http.StatusSeeOther)
		return nil
	}
	r.Body = http.MaxBytesReader(rawWriter(w), r.Body, maxLoginBytes)
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errBodyTooLarge
		}
		return errBodyMalformed
	}
	if !s.validToken(r.PostForm.Get("token")) {
		d := s.throttle.fail(r.RemoteAddr)
		if ok, left := s.throttle.allowLog(r.RemoteAddr); ok {
			s.o.logger.LogAttrs(r.Context(), slog.LevelWarn, "admin: status page login refused",
				slog.String("remote_addr", r.RemoteAddr), slog.Int("refusals_not_logged", left))
		}
		if d > 0 {
			w.Header().Set("Retry-After", retryAfter(d))
			return s.renderLogin(w, r, http.StatusTooManyRequests, "Too many failed logins from this address: wait "+retryAfter(d)+" s before the next try.")
		}
		return s.renderLogin(w, r, http.StatusUnauthorized, "That is not the management token.")
	}
	v, key, err := s.newSession(time.Now().Add(SessionTTL))
	if err != nil {
		return err
	}
	http.SetCookie(w, sessionCookie(r, v, int(SessionTTL/time.Second)))
	s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "admin: status page login", slog.String("remote_addr", r.RemoteAddr))
	// Not a redirect: the page key goes to this origin's script alone,
	// which keeps it in sessionStorage and then opens the page.
	return s.render(w, r, http.StatusOK, pageData{SessionKey: key, Now: time.Now()})
}

// logout clears the session cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, sessionCookie(r, "", -1))
	http.Redirect(w, r, PagePath, http.StatusSeeOther)
	return nil
}

// pageData is what the page shows.
type pageData struct {
	Nonce      string
	Login      bool   // the login form instead of the page
	SessionKey string // a login's page key, for the script to keep (see SessionHeader)
	LoginError string // why the last login failed
	LoggedIn   bool   // through a session: show the logout button
	Now        time.Time

	Status       StatusResponse
	Fleet        bool
	Reachable    bool
	Version      uint64
	Converged    bool
	Drift        bool
	Workers      []pageWorker
	Unreachable  []pageHost
	Backends     []pageBackend
	GateDegraded bool
	HasHistory   bool
	HistoryError bool
	History      []reconf.HistoryEntry
	Pending      *reconf.HistoryEntry // restart-required fields not applied
	Rollout      *pageRollout         // the rollout in progress, else the last one
}

// SessionHeader is SessionHeader, for the page's script.
func (pageData) SessionHeader() string { return SessionHeader }

// PagePath is PagePath, for the page's script.
func (pageData) PagePath() string { return PagePath }

// RolloutPath is RolloutPath, for the page's script.
func (pageData) RolloutPath() string { return RolloutPath }

// pageWorker is a worker row as the status document holds it.
type pageWorker struct {
	ID             string `json:"id"`
	PID            int    `json:"pid"`
	Host           string `json:"host"`
	AppliedVersion uint64 `json:"applied_version"`
	State          string `json:"state"`
	LastError      string `json:"last_error"`
	BootstrapDrift bool   `json:"bootstrap_drift"`
	Behind         bool   `json:"-"`
}

// pageHost is a host the fleet remembers but whose leases lapsed, as the
// status document holds it.
type pageHost struct {
	Host        string `json:"host"`
	LastVersion uint64 `json:"last_version"`
}

// pageBackend is one backend's concurrency as the status document holds it.
type pageBackend struct {
	Name     string `json:"-"`
	Limit    int    `json:"limit"`
	Capacity int    `json:"capacity"`
	InFlight int    `json:"in_flight"`
	Waiting  int    `json:"waiting"`
	Workers  int    `json:"workers"`
	Degraded bool   `json:"degraded"`
}

// statusExtra is the part of the status document a cluster worker or the
// gateway adds (see WithStatusFields), read back from its JSON so the
// page shows exactly what the API answers.
type statusExtra struct {
	ClusterVersion   *uint64                `json:"cluster_version"`
	ClusterReachable *bool                  `json:"cluster_reachable"`
	Converged        bool                   `json:"converged"`
	BootstrapDrift   bool                   `json:"bootstrap_drift"`
	Workers          []pageWorker           `json:"workers"`
	Unreachable      []pageHost             `json:"unreachable_hosts"`
	Concurrency      map[string]pageBackend `json:"concurrency"`
	GateDegraded     bool                   `json:"gate_degraded"`
}

// page renders the status page.
func (s *Server) page(w http.ResponseWriter, r *http.Request) error {
	d := pageData{Now: time.Now(), LoggedIn: s.hasToken && !s.authorized(r), HasHistory: s.o.history != nil}
	st := s.rt.Status()
	d.Status = newStatusResponse(st)
	if s.o.statusFields != nil {
		d.Status.Extra = s.o.statusFields()
	}
	doc, err := json.Marshal(d.Status)
	if err != nil {
		return err
	}
	var ext statusExtra
	if err := json.Unmarshal(doc, &ext); err != nil {
		return err
	}
	if ext.ClusterVersion != nil || ext.ClusterReachable != nil {
		d.Fleet = true
		d.Reachable = ext.ClusterReachable == nil || *ext.ClusterReachable
		if ext.ClusterVersion != nil {
			d.Version = *ext.ClusterVersion
		}
		d.Reachable = d.Reachable && ext.ClusterVersion != nil
		d.Converged, d.Drift, d.Workers, d.Unreachable = ext.Converged, ext.BootstrapDrift, ext.Workers, ext.Unreachable
		for i := range d.Workers {
			d.Workers[i].Behind = d.Workers[i].AppliedVersion != d.Version
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ext.Concurrency)) {
		b := ext.Concurrency[name]
		b.Name = name
		d.Backends = append(d.Backends, b)
	}
	d.GateDegraded = ext.GateDegraded
	d.Rollout = s.rolloutPanel(r.Context(), st.Rollout, d.Now)
	if d.HasHistory {
		es, err := s.o.history(r.Context(), pageHistoryEntries)
		if err != nil {
			s.o.logger.LogAttrs(r.Context(), slog.LevelWarn, "admin: the history could not be read", slog.Any("error", err))
			d.HistoryError = true
		}
		d.History = es
		d.Pending = pendingRestart(es)
	}
	return s.render(w, r, http.StatusOK, d)
}

// pendingRestart returns the newest restart-required attempt when no
// attempt that applied or confirmed the file came after it: the file then
// holds restart-class changes that are not running.
func pendingRestart(es []reconf.HistoryEntry) *reconf.HistoryEntry {
	for i, e := range es {
		switch e.Outcome {
		case reconf.RestartRequired.String():
			return &es[i]
		case reconf.Published.String(), reconf.NoOp.String():
			if e.Trigger != reconf.TriggerCluster {
				return nil
			}
		}
	}
	return nil
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) error {
	return s.render(w, r, status, pageData{Login: true, LoginError: msg, Now: time.Now()})
}

// render writes the template with a fresh nonce and a policy that allows
// nothing but the page's own inline style and script.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, d pageData) error {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return err
	}
	d.Nonce = base64.RawStdEncoding.EncodeToString(n[:])
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer Chromium sends
	// "Origin: null" on the login form's POST, which must be refused.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+d.Nonce+"'; script-src 'nonce-"+d.Nonce+
		"'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
	return nil
}

// appliedSummary says how many workers applied a published version, and
// which failed.
func appliedSummary(e reconf.HistoryEntry) string {
	if len(e.Applies) == 0 {
		return ""
	}
	ok, failures := e.Applied()
	var failed []string
	for _, a := range failures {
		failed = append(failed, a.Worker+": "+string(a.Reason))
	}
	out := strconv.Itoa(ok) + "/" + strconv.Itoa(len(e.Applies)) + " applied"
	if len(failed) > 0 {
		out += "; failed " + strings.Join(failed, ", ")
	}
	return out
}
