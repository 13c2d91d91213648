package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: it issues
// certificates for 127.0.0.1 and localhost, valid for an hour, as PEM
// files in its directory.
type CA struct {
	// File is the CA certificate's PEM file.
	File   string
	t      testing.TB
	dir    string
	key    *ecdsa.PrivateKey
	cert   *x509.Certificate
	serial atomic.Int64
}

// NewCA creates a CA whose files live in dir.
func NewCA(t testing.TB, dir string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reconf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, dir: dir, key: key, cert: cert, File: filepath.Join(dir, "ca.pem")}
	ca.serial.Store(1)
	ca.write(ca.File, "CERTIFICATE", der)
	return ca
}

// Pool returns a pool that trusts the CA, for a client's RootCAs or a
// server's ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func (ca *CA) write(path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
}

// Issue writes name.pem and name-key.pem: a certificate with common name
// name for 127.0.0.1 and localhost, usable by a server and a client.
func (ca *CA) Issue(name string) (certFile, keyFile string) {
	ca.t.Helper()
	return ca.IssueValid(name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// IssueValid is Issue for a certificate valid from notBefore to notAfter
// (an expired one, for a test of its refusal).
func (ca *CA) IssueValid(name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	ca.write(certFile, "CERTIFICATE", der)
	ca.write(keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}
