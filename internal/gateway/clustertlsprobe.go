package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"reflect"
	"syscall"
	"time"
)

// probeTimeout bounds one probe of one member: a dial, a handshake and
// the member's first HTTP/2 frame, all on loopback or a LAN.
const probeTimeout = 2 * time.Second

// tlsProbe finds, beside a join in flight, the faults of an etcd client's
// TLS that retrying cannot cure. The etcd client does not report them: it
// waits for a ready connection (etcd's calls are wait-for-ready) and
// answers only when the call's deadline passes. The probe dials each
// member as the client does, with the same TLS configuration and server
// name, and classifies what the handshake meets by its Go error types.
type tlsProbe struct {
	endpoints []string
	// tls is the client's configuration for https://; nil means the etcd
	// client's default (the system's roots, no client certificate).
	tls *tls.Config
	// useTLS is whether the client speaks TLS: etcd's client decides for
	// every endpoint by the first one's scheme.
	useTLS           bool
	caFile, certFile string
	dialer           net.Dialer
}

// newTLSProbe returns the probe of c's endpoints, or false when there is
// nothing to probe (a shared client, or endpoints that are not http or
// https URLs).
func newTLSProbe(c ClusterOptions) (*tlsProbe, bool) {
	if c.Client != nil || len(c.Endpoints) == 0 {
		return nil, false
	}
	p := &tlsProbe{endpoints: c.Endpoints, tls: c.TLS, caFile: c.CAFile, certFile: c.CertFile}
	for i, ep := range c.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, false
		}
		if i == 0 {
			p.useTLS = u.Scheme == "https"
		}
	}
	return p, true
}

// check probes every endpoint once. It returns the permanent faults when
// every endpoint has one (a fleet with one healthy member still joins),
// and nil otherwise.
func (p *tlsProbe) check(ctx context.Context) error {
	var errs []error
	for _, ep := range p.endpoints {
		err := p.endpoint(ctx, ep)
		var te *ClusterTLSError
		if !errors.As(err, &te) {
			return nil
		}
		errs = append(errs, te)
	}
	return errors.Join(errs...)
}

// firstProbe is how long a join runs before the probe's first round: a
// join that succeeds sooner (nearly every one) costs the members no extra
// handshake, and one whose TLS a member refuses still fails within a
// second.
const firstProbe = 250 * time.Millisecond

// watch probes until ctx ends, with growing pauses, and calls fail with
// the first permanent verdict.
func (p *tlsProbe) watch(ctx context.Context, fail context.CancelCauseFunc) {
	pause := 100 * time.Millisecond
	t := time.NewTimer(firstProbe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := p.check(ctx); err != nil && ctx.Err() == nil {
			fail(err)
			return
		}
		t.Reset(pause)
		pause = min(2*pause, 2*time.Second)
	}
}

// endpoint probes one member: nil when it answered as the client expects,
// a *ClusterTLSError for a permanent fault, any other error for a fault
// that may pass (refused, timed out, reset).
func (p *tlsProbe) endpoint(ctx context.Context, ep string) error {
	u, err := url.Parse(ep)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if p.useTLS {
		err := p.handshake(ctx, u, p.tls)
		if err == nil {
			return nil
		}
		if r, file, ok := p.classify(err); ok {
			return &ClusterTLSError{Endpoint: ep, Reason: r, File: file, Err: err}
		}
		if notTLS(err) && p.plain(ctx, u) == nil {
			return &ClusterTLSError{Endpoint: ep, Reason: TLSNotServed}
		}
		return err
	}
	err = p.plain(ctx, u)
	if err == nil || !notHTTP2(err) {
		return err
	}
	if servesTLS(p.handshake(ctx, u, p.tls)) {
		return &ClusterTLSError{Endpoint: ep, Reason: TLSRequired}
	}
	return err
}

// handshake makes the client's TLS handshake with the member at u and
// reads its first HTTP/2 frame: under TLS 1.3 a member refuses a client
// certificate only after the client's handshake has completed.
func (p *tlsProbe) handshake(ctx context.Context, u *url.URL, cfg *tls.Config) error {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		// As gRPC names the member: the endpoint's host.
		cfg.ServerName = u.Hostname()
	}
	cfg.NextProtos = []string{"h2"}
	conn, err := p.dial(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close()
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	return http2Hello(tc)
}

// plain speaks HTTP/2 without TLS to the member at u, as the client does
// for http://.
func (p *tlsProbe) plain(ctx context.Context, u *url.URL) error {
	conn, err := p.dial(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close()
	return http2Hello(conn)
}

func (p *tlsProbe) dial(ctx context.Context, u *url.URL) (net.Conn, error) {
	conn, err := p.dialer.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	// A join that completes ends the probe in flight at once.
	context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	return conn, nil
}

// The client connection preface of HTTP/2 (RFC 9113, section 3.4): the
// fixed string, then an empty SETTINGS frame. A server's preface starts
// with its own SETTINGS frame.
var (
	http2Preface  = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	errNotHTTP2   = errors.New("gateway: the member did not answer with an HTTP/2 SETTINGS frame")
	http2Settings = byte(0x4)
)

// http2Hello sends the client preface on conn and reads the server's
// first frame header: nil when it is SETTINGS on stream 0.
func http2Hello(conn net.Conn) error {
	if _, err := conn.Write(http2Preface); err != nil {
		return err
	}
	var h [9]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return err
	}
	if h[3] != http2Settings || !bytes.Equal(h[5:9], []byte{0, 0, 0, 0}) {
		return errNotHTTP2
	}
	return nil
}

// classify names the permanent fault of a TLS handshake's error, and the
// file in question.
func (p *tlsProbe) classify(err error) (ClusterTLSReason, string, bool) {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return TLSUnknownAuthority, p.caFile, true
	case errors.As(err, &hostname):
		return TLSNameMismatch, "", true
	case errors.As(err, &invalid):
		return TLSMemberCertificateInvalid, "", true
	}
	a, ok := remoteAlert(err)
	if !ok {
		return 0, "", false
	}
	noCert := p.tls == nil || (len(p.tls.Certificates) == 0 && p.tls.GetClientCertificate == nil)
	switch a {
	case alertCertificateRequired:
		return TLSCertificateRequired, "", true
	case alertHandshakeFailure:
		// Under TLS 1.2 a Go member (etcd is one) answers a missing
		// client certificate so; with a certificate given, a Go member
		// sends it only when the two sides share no cipher suite, group
		// or signature scheme.
		if noCert {
			return TLSCertificateRequired, "", true
		}
		return TLSNoCommonParameters, "", true
	case alertProtocolVersion, alertInsufficientSecurity:
		return TLSNoCommonParameters, "", true
	case alertBadCertificate, alertUnsupportedCertificate, alertCertificateRevoked,
		alertCertificateExpired, alertCertificateUnknown, alertUnknownCA:
		if noCert {
			return TLSCertificateRequired, "", true
		}
		return TLSCertificateRejected, p.certFile, true
	}
	return 0, "", false
}

// The TLS alerts (RFC 8446, section 6) a member sends for a client
// certificate it refuses or misses, or for a handshake whose parameters
// it shares none of.
const (
	alertHandshakeFailure       = 40
	alertBadCertificate         = 42
	alertUnsupportedCertificate = 43
	alertCertificateRevoked     = 44
	alertCertificateExpired     = 45
	alertCertificateUnknown     = 46
	alertUnknownCA              = 48
	alertProtocolVersion        = 70
	alertInsufficientSecurity   = 71
	alertCertificateRequired    = 116
)

// remoteAlert returns the alert the peer sent, if err is one. crypto/tls
// reports it as a *net.OpError with Op "remote error" around its
// unexported alert type, a uint8 (tls.AlertError is QUIC's alone), so the
// code is read from that type, not from the message.
func remoteAlert(err error) (uint8, bool) {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return 0, false
	}
	v := reflect.ValueOf(op.Err)
	if t := v.Type(); t.PkgPath() != "crypto/tls" || t.Kind() != reflect.Uint8 {
		return 0, false
	}
	return uint8(v.Uint()), true
}

// notTLS reports whether a TLS handshake's error says the peer did not
// answer in TLS: a record that is not TLS, or a close without a word.
func notTLS(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// notHTTP2 reports whether a plain HTTP/2 hello's error says the peer
// does not speak it: another first frame, or a close without a word.
func notHTTP2(err error) bool {
	return errors.Is(err, errNotHTTP2) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// servesTLS reports whether a TLS handshake's result shows a peer that
// speaks TLS: it completed, or it failed on a certificate or an alert.
func servesTLS(err error) bool {
	if err == nil {
		return true
	}
	var verify *tls.CertificateVerificationError
	_, alert := remoteAlert(err)
	return alert || errors.As(err, &verify)
}
