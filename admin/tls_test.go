package admin_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/testkit"
)

// mtls is a server CA and a client CA with their issued pairs.
type mtls struct {
	t                 *testing.T
	actor             chan string // the actor of each attempt after the start
	serverCA, otherCA *testkit.CA
	clientCA          *testkit.CA
	roots             *x509.CertPool
	files             admin.TLSFiles
}

func newMTLS(t *testing.T, mode admin.ClientAuth) *mtls {
	dir := t.TempDir()
	m := &mtls{t: t, serverCA: testkit.NewCA(t, filepath.Join(mkdir(t, dir, "server"))),
		clientCA: testkit.NewCA(t, mkdir(t, dir, "client")), otherCA: testkit.NewCA(t, mkdir(t, dir, "other"))}
	cert, key := m.serverCA.Issue("management")
	m.files = admin.TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: m.clientCA.File, ClientAuth: mode}
	m.roots = m.serverCA.Pool()
	return m
}

func mkdir(t *testing.T, dir, name string) string {
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// client returns an https client presenting the certificate ca issues
// for name (none when ca is nil).
func (m *mtls) client(ca *testkit.CA, name string) *http.Client {
	c := &tls.Config{RootCAs: m.roots}
	if ca != nil {
		cf, kf := ca.Issue(name)
		pair, err := tls.LoadX509KeyPair(cf, kf)
		if err != nil {
			m.t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func (m *mtls) start(token string) *env {
	m.t.Helper()
	mat, err := m.files.Load(context.Background())
	if err != nil {
		m.t.Fatal(err)
	}
	m.actor = make(chan string, 16)
	observe := reconf.ObserverFunc(func(r reconf.Result) {
		if r.Trigger == reconf.TriggerAPI {
			m.actor <- r.Actor
		}
	})
	e := start(m.t, setup{token: token, admin: []admin.Option{admin.WithTLS(mat)}, runtime: []reconf.Option{reconf.WithObserver(observe)}})
	e.base = strings.Replace(e.base, "http://", "https://", 1)
	return e
}

// call posts a reload with c and the token (if any); it returns the
// status and the actor the attempt recorded, or the transport error.
func (m *mtls) call(e *env, c *http.Client, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, e.base+admin.ReloadPath, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, "", nil
	}
	select {
	case a := <-m.actor:
		return resp.StatusCode, a, nil
	case <-time.After(5 * time.Second):
		return resp.StatusCode, "", errors.New("no attempt observed")
	}
}

// TestManagementClientCertificates: with client CAs, a verified client
// certificate authorizes a request instead of the token (either) or only
// together with it (both); the history names the certificate's subject.
func TestManagementClientCertificates(t *testing.T) {
	t.Run("either", func(t *testing.T) {
		m := newMTLS(t, admin.CertOrToken)
		e := m.start(testToken)
		for name, tc := range map[string]struct {
			client    *http.Client
			token     string
			want      int
			wantActor string
		}{
			"token, no certificate":       {m.client(nil, ""), testToken, 200, "api token"},
			"certificate, no token":       {m.client(m.clientCA, "ops-alice"), "", 200, "api cert CN=ops-alice"},
			"certificate and token":       {m.client(m.clientCA, "ops-bob"), testToken, 200, "api cert CN=ops-bob"},
			"neither":                     {m.client(nil, ""), "", 401, ""},
			"certificate of another CA":   {m.client(m.otherCA, "mallory"), testToken, -1, ""},
			"wrong token, no certificate": {m.client(nil, ""), "0123456789abcdef-wrong", 401, ""},
		} {
			status, actor, err := m.call(e, tc.client, tc.token)
			switch {
			case tc.want == -1 && err == nil:
				t.Errorf("%s: the handshake succeeded (%d)", name, status)
			case tc.want != -1 && (err != nil || status != tc.want):
				t.Errorf("%s: got %d, %v; want %d", name, status, err, tc.want)
			case tc.want == 200 && actor != tc.wantActor:
				t.Errorf("%s: actor %q, want %q", name, actor, tc.wantActor)
			}
		}
	})
	t.Run("both", func(t *testing.T) {
		m := newMTLS(t, admin.CertAndToken)
		e := m.start(testToken)
		if status, actor, err := m.call(e, m.client(m.clientCA, "ops-alice"), testToken); err != nil || status != 200 || actor != "api cert CN=ops-alice" {
			t.Errorf("certificate and token: %d %q %v", status, actor, err)
		}
		if status, _, err := m.call(e, m.client(m.clientCA, "ops-alice"), ""); err != nil || status != 401 {
			t.Errorf("certificate without the token: %d %v, want 401", status, err)
		}
		if _, _, err := m.call(e, m.client(nil, ""), testToken); err == nil {
			t.Error("the token without a certificate: the handshake succeeded")
		}
	})
	t.Run("certificates without a token", func(t *testing.T) {
		m := newMTLS(t, admin.CertOrToken)
		e := m.start("")
		if status, _, err := m.call(e, m.client(nil, ""), ""); err != nil || status != 401 {
			t.Errorf("no certificate: %d %v, want 401 (client certificates are the credential)", status, err)
		}
		if status, _, err := m.call(e, m.client(m.clientCA, "ops"), ""); err != nil || status != 200 {
			t.Errorf("a certificate: %d %v, want 200", status, err)
		}
	})
}

// TestManagementTLSRotates: SetTLS makes the next handshake present the
// new certificate; a plain server refuses SetTLS.
func TestManagementTLSRotates(t *testing.T) {
	m := newMTLS(t, admin.CertOrToken)
	e := m.start(testToken)
	presented := func() string {
		c, err := tls.Dial("tcp", strings.TrimPrefix(e.base, "https://"), &tls.Config{RootCAs: m.roots})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := presented(); got != "management" {
		t.Fatalf("presented %q", got)
	}
	m.files.CertFile, m.files.KeyFile = m.serverCA.Issue("management-2")
	mat, err := m.files.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SetTLS(mat); err != nil {
		t.Fatal(err)
	}
	if got := presented(); got != "management-2" {
		t.Fatalf("after SetTLS presented %q", got)
	}
	plain := start(t, setup{token: testToken})
	if err := plain.srv.SetTLS(mat); !errors.Is(err, admin.ErrTLS) {
		t.Fatalf("SetTLS on a plain server = %v", err)
	}
}

// TestManagementTLSFilesRefused: unusable files are refused naming the
// file, never quoting it.
func TestManagementTLSFilesRefused(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, dir)
	cert, key := ca.Issue("m")
	_, other := ca.Issue("other")
	old, oldKey := ca.IssueValid("old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute))
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("canary-garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo, _ := testkit.HostileFiles(t, dir)
	for name, tc := range map[string]struct {
		files admin.TLSFiles
		file  string
	}{
		"no key":            {admin.TLSFiles{CertFile: cert}, admin.EnvTLSKeyFile},
		"key mismatch":      {admin.TLSFiles{CertFile: cert, KeyFile: other}, other},
		"expired":           {admin.TLSFiles{CertFile: old, KeyFile: oldKey}, old},
		"garbage cert":      {admin.TLSFiles{CertFile: garbage, KeyFile: key}, garbage},
		"fifo CA":           {admin.TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: fifo}, fifo},
		"garbage CA":        {admin.TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: garbage}, garbage},
		"both without a CA": {admin.TLSFiles{CertFile: cert, KeyFile: key, ClientAuth: admin.CertAndToken}, admin.EnvClientCAFile},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := tc.files.Load(ctx)
		cancel()
		if !errors.Is(err, admin.ErrTLS) || !strings.Contains(err.Error(), tc.file) || strings.Contains(err.Error(), "canary") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestConfigBothNeedsAToken: client auth both without a token is refused
// before anything listens.
func TestConfigBothNeedsAToken(t *testing.T) {
	env := map[string]string{admin.EnvAddress: "127.0.0.1:0", admin.EnvClientAuth: "both"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := admin.ConfigFromEnv(lookup).Check(); !errors.Is(err, admin.ErrTLS) {
		t.Fatalf("both without a token: %v, want ErrTLS", err)
	}
	env[admin.EnvToken] = testToken
	if err := admin.ConfigFromEnv(lookup).Check(); err != nil {
		t.Fatalf("both with a token: %v", err)
	}
	env[admin.EnvClientAuth] = "sometimes"
	if err := admin.ConfigFromEnv(lookup).Check(); !errors.Is(err, admin.ErrTLS) {
		t.Fatalf("client auth sometimes: %v, want ErrTLS", err)
	}
}
