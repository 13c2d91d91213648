//go:build unix

package e2e

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit"
)

// TestManagementMutualTLS serves management over TLS with client
// certificates (either a certificate or the token authorizes): a client
// certificate of the client CA is accepted and named in the history, no
// credential is refused 401, a certificate of another CA fails the
// handshake; the CLI reaches it with --ca-file and --cert/--key, or
// through the discovery file, which records the scheme; a reload
// re-reads the certificate files. Cost: about 3 s.
func TestManagementMutualTLS(t *testing.T) {
	dir := t.TempDir()
	mkdir := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serverCA, clientCA, otherCA := testkit.NewCA(t, mkdir("server")), testkit.NewCA(t, mkdir("client")), testkit.NewCA(t, mkdir("other"))
	certFile, keyFile := filepath.Join(dir, "mgmt.pem"), filepath.Join(dir, "mgmt-key.pem")
	install := func(name string) {
		c, k := serverCA.Issue(name)
		for from, to := range map[string]string{c: certFile, k: keyFile} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			writeAtomic(t, to, string(b))
		}
	}
	install("mgmt-1")
	opsCert, opsKey := clientCA.Issue("ops-alice")
	runtimeDir := t.TempDir()
	s := startServer(t, config(4, "0s"), []string{"--management-address", "127.0.0.1:0",
		"--management-tls-cert", certFile, "--management-tls-key", keyFile, "--management-client-ca", clientCA.File},
		"RECONF_MANAGEMENT_TOKEN="+token, "XDG_RUNTIME_DIR="+runtimeDir)

	roots := serverCA.Pool()
	client := func(certFile, keyFile string) *http.Client {
		c := &tls.Config{RootCAs: roots}
		if certFile != "" {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	}
	base := "https://" + s.mgmt
	post := func(c *http.Client) (int, error) {
		resp, err := c.Post(base+"/admin/config/reload", "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(client(opsCert, opsKey)); err != nil || code != 200 {
		t.Fatalf("a client certificate of the client CA: %d %v, want 200", code, err)
	}
	if code, err := post(client("", "")); err != nil || code != 401 {
		t.Fatalf("no certificate, no token: %d %v, want 401", code, err)
	}
	mc, mk := otherCA.Issue("mallory")
	if code, err := post(client(mc, mk)); err == nil {
		t.Fatalf("a certificate of another CA: the handshake succeeded (%d)", code)
	}
	resp, err := client(opsCert, opsKey).Get(base + "/admin/config/history")
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Entries []struct{ Trigger, Actor string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if len(h.Entries) == 0 || h.Entries[0].Actor != "api cert CN=ops-alice" {
		t.Fatalf("the history's newest entry: %+v, want actor api cert CN=ops-alice", h.Entries)
	}

	// The CLI: with the CA and a client certificate (no token), with the
	// token, through the discovery file's scheme, and refused without the
	// CA.
	addr := []string{"--address", base, "--ca-file", serverCA.File}
	if code, out, errOut := reconfd(t, []string{"XDG_RUNTIME_DIR=" + runtimeDir}, append([]string{"status", "--cert", opsCert, "--key", opsKey}, addr...)...); code != 0 {
		t.Fatalf("status with a client certificate: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_TOKEN=" + token}, append([]string{"reload"}, addr...)...); code != 0 {
		t.Fatalf("reload with the token: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := reconfd(t, []string{"XDG_RUNTIME_DIR=" + runtimeDir, "RECONF_MANAGEMENT_CA_FILE=" + serverCA.File,
		"RECONF_MANAGEMENT_TOKEN=" + token}, "history"); code != 0 {
		t.Fatalf("history through the discovery file: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := reconfd(t, []string{"RECONF_MANAGEMENT_TOKEN=" + token}, "status", "--address", base); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("status without the CA: exit %d, %s; want 1 naming the certificate", code, errOut)
	}

	// Rotation: new files, a reload, and the next handshake presents them.
	install("mgmt-2")
	s.signal(syscall.SIGHUP)
	waitLog(t, s, "management TLS files re-read")
	c, err := tls.Dial("tcp", s.mgmt, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName
	c.Close()
	if cn != "mgmt-2" {
		t.Fatalf("after the reload the management listener presents %q, want mgmt-2", cn)
	}
}
