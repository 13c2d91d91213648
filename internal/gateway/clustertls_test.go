package gateway

import (
	"context"
	"crypto/tls"
	"encoding"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/internal/testkit"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// tlsMembers are the etcd members of the TLS classification tests: one
// serving https that requires client certificates from ca, and one
// serving plain http.
type tlsMembers struct {
	ca, other          *testkit.CA
	cert, key          string // a client certificate ca signed
	foreign, foreignKy string // one the other CA signed
	tlsEP, plainEP     string
	tlsCluster         *embedded.Cluster
}

func startTLSMembers(t *testing.T) *tlsMembers {
	t.Helper()
	m := &tlsMembers{ca: testkit.NewCA(t, t.TempDir()), other: testkit.NewCA(t, t.TempDir())}
	srvCert, srvKey := m.ca.Issue("member")
	m.cert, m.key = m.ca.Issue("fleet")
	m.foreign, m.foreignKy = m.other.Issue("stranger")
	m.tlsCluster = testetcd.StartCluster(t, 1, embedded.Config{TLS: &embedded.TLSFiles{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: m.ca.File}})
	m.tlsEP = m.tlsCluster.Endpoints()[0]
	m.plainEP = testetcd.StartCluster(t, 1, embedded.Config{}).Endpoints()[0]
	return m
}

// options are the cluster options of a worker that reaches ep with the
// files, read as reconfd reads them.
func (m *tlsMembers) options(t *testing.T, ep string, files propagate.TLSFiles) ClusterOptions {
	t.Helper()
	o := ClusterOptions{Endpoints: []string{ep}, CAFile: files.CAFile, CertFile: files.CertFile}
	if files != (propagate.TLSFiles{}) {
		cfg, err := files.Config()
		if err != nil {
			t.Fatal(err)
		}
		o.TLS = cfg
	}
	return o
}

// TestTLSProbeClassifies probes real etcd members with each kind of TLS
// fault a worker can meet, and with none: each fault is named by its
// reason and file, and a refused connection is no fault of TLS (the join
// keeps retrying it).
func TestTLSProbeClassifies(t *testing.T) {
	m := startTLSMembers(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "https://" + closed.Addr().String()
	closed.Close()
	good := propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.cert, KeyFile: m.key}
	oldCert, oldKey := m.ca.IssueValid("expired", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	expiredEP := testetcd.StartCluster(t, 1, embedded.Config{TLS: &embedded.TLSFiles{CertFile: oldCert, KeyFile: oldKey, TrustedCAFile: m.ca.File}}).Endpoints()[0]
	for _, tc := range []struct {
		name   string
		ep     string
		files  propagate.TLSFiles
		adjust func(*tls.Config)
		want   ClusterTLSReason // 0: no ClusterTLSError
		file   string
	}{
		{name: "joins", ep: m.tlsEP, files: good},
		{name: "plain joins", ep: m.plainEP},
		{name: "no client certificate", ep: m.tlsEP, files: propagate.TLSFiles{CAFile: m.ca.File}, want: TLSCertificateRequired},
		{name: "no client certificate, TLS 1.2", ep: m.tlsEP, files: propagate.TLSFiles{CAFile: m.ca.File},
			adjust: func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }, want: TLSCertificateRequired},
		{name: "certificate of another CA", ep: m.tlsEP, files: propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.foreign, KeyFile: m.foreignKy},
			want: TLSCertificateRejected, file: m.foreign},
		{name: "certificate of another CA, TLS 1.2", ep: m.tlsEP, files: propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.foreign, KeyFile: m.foreignKy},
			adjust: func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }, want: TLSCertificateRejected, file: m.foreign},
		{name: "CA that did not sign the member", ep: m.tlsEP, files: propagate.TLSFiles{CAFile: m.other.File, CertFile: m.cert, KeyFile: m.key},
			want: TLSUnknownAuthority, file: m.other.File},
		{name: "system roots", ep: m.tlsEP, want: TLSUnknownAuthority},
		{name: "another server name", ep: m.tlsEP, files: good,
			adjust: func(c *tls.Config) { c.ServerName = "etcd.elsewhere.test" }, want: TLSNameMismatch},
		{name: "expired member certificate", ep: expiredEP, files: good, want: TLSMemberCertificateInvalid},
		{name: "https to a plain member", ep: "https" + m.plainEP[len("http"):], files: good, want: TLSNotServed},
		{name: "http to a TLS member", ep: "http" + m.tlsEP[len("https"):], want: TLSRequired},
		{name: "http to a TLS member with the files", ep: "http" + m.tlsEP[len("https"):], files: good, want: TLSRequired},
		{name: "no common cipher suite", ep: m.tlsEP, files: good,
			adjust: func(c *tls.Config) {
				c.MaxVersion, c.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA}
			}, want: TLSNoCommonParameters},
		{name: "no common version", ep: m.tlsEP, files: good,
			adjust: func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 }, want: TLSNoCommonParameters},
		{name: "refused", ep: refused, files: good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := m.options(t, tc.ep, tc.files)
			if tc.adjust != nil {
				if o.TLS == nil {
					o.TLS = &tls.Config{}
				}
				tc.adjust(o.TLS)
			}
			p, ok := newTLSProbe(o)
			if !ok {
				t.Fatal("no probe")
			}
			err := p.endpoint(context.Background(), tc.ep)
			var te *ClusterTLSError
			switch {
			case tc.want == 0 && errors.As(err, &te):
				t.Fatalf("got %v, want no fault of TLS", err)
			case tc.want == 0:
				if tc.ep == refused && !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("got %v, want connection refused", err)
				}
				if tc.ep != refused && err != nil {
					t.Errorf("got %v, want nil", err)
				}
				if p.check(context.Background()) != nil {
					t.Errorf("check: got %v, want nil", err)
				}
			case !errors.As(err, &te):
				t.Fatalf("got %v, want %s", err, tc.want)
			case te.Reason != tc.want || te.File != tc.file || te.Endpoint != tc.ep:
				t.Errorf("got %s for %s with file %q, want %s for %s with %q: %v", te.Reason, te.Endpoint, te.File, tc.want, tc.ep, tc.file, err)
			}
		})
	}
}

// TestTLSProbeNeedsEveryMember checks that a fault at one member of
// several does not fail a join that a healthy member can serve.
func TestTLSProbeNeedsEveryMember(t *testing.T) {
	m := startTLSMembers(t)
	files := propagate.TLSFiles{CAFile: m.ca.File}
	o := m.options(t, m.tlsEP, files)
	o.Endpoints = []string{m.tlsEP, "https" + m.plainEP[len("http"):]}
	p, _ := newTLSProbe(o)
	var te *ClusterTLSError
	if err := p.check(context.Background()); !errors.As(err, &te) {
		t.Fatalf("both members refused: got %v", err)
	}
	o = m.options(t, m.tlsEP, propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.cert, KeyFile: m.key})
	o.Endpoints = []string{"https" + m.plainEP[len("http"):], m.tlsEP}
	p, _ = newTLSProbe(o)
	if err := p.check(context.Background()); err != nil {
		t.Fatalf("one member serves: got %v, want nil", err)
	}
}

// TestClusterJoinFailsOnTLS starts gateways that join a member which
// requires a client certificate from its CA: with one another CA signed,
// with that and a user (whose login waits for a member like any call),
// and with the member's certificate but no cipher suite the member
// accepts. New fails with the reason instead of waiting out the join's
// timeout (or, with the user, the login's).
func TestClusterJoinFailsOnTLS(t *testing.T) {
	m := startTLSMembers(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, baseConfig)
	foreign := propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.foreign, KeyFile: m.foreignKy}
	good := propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.cert, KeyFile: m.key}
	for _, tc := range []struct {
		name   string
		files  propagate.TLSFiles
		adjust func(*ClusterOptions)
		want   ClusterTLSReason
		file   string
	}{
		{name: "certificate of another CA", files: foreign, want: TLSCertificateRejected, file: m.foreign},
		{name: "certificate of another CA, with a user", files: foreign,
			adjust: func(o *ClusterOptions) { o.Username, o.Password = "fleet", "pw-fleet" }, want: TLSCertificateRejected, file: m.foreign},
		{name: "no common cipher suite", files: good,
			adjust: func(o *ClusterOptions) {
				o.TLS.MaxVersion, o.TLS.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_RSA_WITH_AES_128_CBC_SHA}
			}, want: TLSNoCommonParameters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := m.options(t, m.tlsEP, tc.files)
			if tc.adjust != nil {
				tc.adjust(&o)
			}
			ctx, cancel := context.WithTimeout(context.Background(), gateJoinTimeout/2)
			defer cancel()
			_, err := New(ctx, path, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), WithCluster(o))
			var te *ClusterTLSError
			if !errors.As(err, &te) || te.Reason != tc.want || te.File != tc.file {
				t.Fatalf("got %v, want %s naming %q", err, tc.want, tc.file)
			}
		})
	}
}

// TestClusterJoinRetriesRefused starts a gateway while its TLS member is
// down: the refused connections are retried, and the join completes once
// the member is back.
func TestClusterJoinRetriesRefused(t *testing.T) {
	m := startTLSMembers(t)
	// Long enough for several probes to meet the refusal.
	joinsWhenMemberReturns(t, m.tlsCluster, m.options(t, m.tlsEP, propagate.TLSFiles{CAFile: m.ca.File, CertFile: m.cert, KeyFile: m.key}), time.Second)
}

func TestClusterTLSReasonText(t *testing.T) {
	want := map[ClusterTLSReason]string{
		TLSCertificateRequired:      "cluster_tls_certificate_required",
		TLSCertificateRejected:      "cluster_tls_certificate_rejected",
		TLSUnknownAuthority:         "cluster_tls_unknown_authority",
		TLSNameMismatch:             "cluster_tls_name_mismatch",
		TLSMemberCertificateInvalid: "cluster_tls_member_certificate_invalid",
		TLSNotServed:                "cluster_tls_not_served",
		TLSRequired:                 "cluster_tls_required",
		TLSNoCommonParameters:       "cluster_tls_no_common_parameters",
	}
	for r := ClusterTLSReason(0); r <= TLSNoCommonParameters+1; r++ {
		var m encoding.TextMarshaler = r
		b, err := m.MarshalText()
		w, known := want[r]
		switch {
		case known && (err != nil || string(b) != w || r.String() != w):
			t.Errorf("%d: got %q %v and %q, want %q", r, b, err, r.String(), w)
		case !known && err == nil:
			t.Errorf("%d: got %q, want an error", r, b)
		}
	}
	if len(want) != int(TLSNoCommonParameters) {
		t.Errorf("the table misses a reason")
	}
}
