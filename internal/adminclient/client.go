// Package adminclient is the client of reconfd's management API that the
// CLI's commands share: finding the server, one request per connection,
// a retry where a restart handed the request's process over, and an
// exact reload's wait for expected content.
package adminclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/certfile"
	"github.com/reconfhq/reconf/internal/discovery"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/restartapi"
)

// Client is the management API's client as reconfd's commands use it:
// one request per connection, retried once where the process that had it
// handed over. Resolve fills it from the environment and the discovery
// files before its first call.
type Client struct {
	Address, Token string
	// Timeout bounds each request.
	Timeout time.Duration
	// An https management listener: the CA that signed its certificate
	// (default: the system's roots) and, where it asks for one, this
	// client's certificate and key.
	CAFile, CertFile, KeyFile string
	// IfMatch is the If-Match of a reload that expects exact content.
	IfMatch string
}

// The CLI's environment for an https management listener.
const (
	EnvCA   = "RECONF_MANAGEMENT_CA_FILE"
	EnvCert = "RECONF_MANAGEMENT_CLIENT_CERT_FILE"
	EnvKey  = "RECONF_MANAGEMENT_CLIENT_KEY_FILE"
)

// Resolve fills the address, the token and the TLS files from the
// environment and the discovery files where they are not set, checks
// them, and returns the base URL of the management API.
func (c *Client) Resolve(lookup func(string) (string, bool)) (string, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return v
	}
	if c.Address == "" {
		c.Address = strings.TrimSpace(get(admin.EnvAddress))
	}
	if c.Token == "" {
		c.Token = get(admin.EnvToken)
	}
	for p, name := range map[*string]string{&c.CAFile: EnvCA, &c.CertFile: EnvCert, &c.KeyFile: EnvKey} {
		if *p == "" {
			*p = get(name)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return "", exitcode.Usagef("--cert and --key go together")
	}
	addr, token, err := discovery.Find(lookup, c.Address, c.Token)
	if err != nil {
		return "", err
	}
	c.Address, c.Token = addr, token
	base := c.Address
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return strings.TrimRight(base, "/"), nil
}

// Call sends one management request and returns the status and body. It
// sends it once more, on a new connection, when the process that took it
// was handing over to a successor (409 handover_in_progress: the new
// connection reaches the process that serves), and, except for a
// restart, when the connection broke without an answer (the process that
// had it handed over and closed it).
func (c *Client) Call(ctx context.Context, method, url string, body []byte) (int, []byte, error) {
	status, b, err := c.callOnce(ctx, method, url, body)
	if retryable(method, url, status, b, err) && ctx.Err() == nil {
		return c.callOnce(ctx, method, url, body)
	}
	return status, b, err
}

// retryable reports whether an answer (or its absence) came from a
// process that no longer serves, so that the same request on a new
// connection reaches one that does.
func retryable(method, url string, status int, body []byte, err error) bool {
	if err != nil {
		restart := method == http.MethodPost && strings.Contains(url, admin.RestartPath)
		return !restart && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
	}
	if status != http.StatusConflict {
		return false
	}
	var e admin.ErrorBody
	return json.Unmarshal(body, &e) == nil && e.Error.Reason == restartapi.ReasonHandoverInProgress
}

// callOnce sends one management request on a new connection.
func (c *Client) callOnce(ctx context.Context, method, url string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.IfMatch != "" {
		req.Header.Set("If-Match", c.IfMatch)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if strings.HasPrefix(url, "https://") {
		if tr.TLSClientConfig, err = c.tlsConfig(ctx); err != nil {
			return 0, nil, err
		}
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("the management API cannot be reached: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the management API's answer: %w", err)
	}
	return resp.StatusCode, b, nil
}

// tlsConfig is the client's TLS: the CA bundle and client pair from
// their files, read with the bounded reader.
func (c *Client) tlsConfig(ctx context.Context) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := certfile.ReadPool(ctx, c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the CA file %w", err)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := certfile.Read(ctx, c.CertFile, c.KeyFile, time.Now())
		if err != nil {
			return nil, fmt.Errorf("the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{*pair}
	}
	return cfg, nil
}

// Get reads one JSON document (what names it in errors) into v and
// returns its bytes; anything but 200 and JSON is an exit-1 error.
func (c *Client) Get(ctx context.Context, url, what string, v any) ([]byte, error) {
	status, body, err := c.Call(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, exitcode.Fail("%v", err)
	}
	if status != http.StatusOK {
		return nil, c.Refused(status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, exitcode.Fail("the management API's %s is not JSON: %v", what, err)
	}
	return body, nil
}

// Refused explains an answer that is not a result: 401, 403, 400, 202...
// A 401 to a request sent without a token says how to give one: a server
// whose token was set (not generated) keeps it out of its discovery file.
func (c *Client) Refused(status int, body []byte) error {
	var hint string
	if status == http.StatusUnauthorized && c.Token == "" {
		hint = "; no token was sent: pass --token or set " + admin.EnvToken
	}
	var e admin.ErrorBody
	if json.Unmarshal(body, &e) == nil && e.Error.Reason != "" {
		return exitcode.Fail("the management API answered %d %s: %s%s", status, e.Error.Reason, e.Error.Message, hint)
	}
	return exitcode.Fail("the management API answered %d %s%s", status, http.StatusText(status), hint)
}
