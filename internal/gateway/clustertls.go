package gateway

import (
	"fmt"

	"github.com/reconfhq/reconf/internal/redact"
)

// ClusterTLSReason says why a worker's connection to an etcd member can
// never succeed as configured: the member and the worker disagree on TLS,
// on a certificate or on an authority. Retrying does not cure any of them,
// so a join that meets one fails at once. It is a closed enum; its String
// is the stable reason an operator sees and a script may match.
type ClusterTLSReason uint8

// The reasons of a ClusterTLSError.
const (
	// TLSCertificateRequired: the member requires a client certificate
	// and the worker has none.
	TLSCertificateRequired ClusterTLSReason = iota + 1
	// TLSCertificateRejected: the member refused the worker's client
	// certificate (signed by a CA it does not trust, expired, revoked, or
	// not for client use).
	TLSCertificateRejected
	// TLSUnknownAuthority: the member's certificate is not signed by the
	// worker's CA (or, without one, by the system's roots).
	TLSUnknownAuthority
	// TLSNameMismatch: the member's certificate does not name the host of
	// the endpoint the worker dialled.
	TLSNameMismatch
	// TLSMemberCertificateInvalid: the member's certificate is expired, not
	// yet valid, or not for server use.
	TLSMemberCertificateInvalid
	// TLSNotServed: an https:// endpoint whose member serves plain HTTP/2.
	TLSNotServed
	// TLSRequired: an http:// endpoint whose member serves TLS.
	TLSRequired
	// TLSNoCommonParameters: the member and the worker share no TLS
	// version, cipher suite, key exchange group or signature scheme (the
	// member's --tls-min-version, --tls-max-version or --cipher-suites
	// admit none of what the worker offers).
	TLSNoCommonParameters
)

var clusterTLSReasons = [...]string{
	TLSCertificateRequired:      "cluster_tls_certificate_required",
	TLSCertificateRejected:      "cluster_tls_certificate_rejected",
	TLSUnknownAuthority:         "cluster_tls_unknown_authority",
	TLSNameMismatch:             "cluster_tls_name_mismatch",
	TLSMemberCertificateInvalid: "cluster_tls_member_certificate_invalid",
	TLSNotServed:                "cluster_tls_not_served",
	TLSRequired:                 "cluster_tls_required",
	TLSNoCommonParameters:       "cluster_tls_no_common_parameters",
}

// String returns the stable reason, such as
// "cluster_tls_certificate_rejected".
func (r ClusterTLSReason) String() string {
	if int(r) < len(clusterTLSReasons) && clusterTLSReasons[r] != "" {
		return clusterTLSReasons[r]
	}
	return fmt.Sprintf("ClusterTLSReason(%d)", uint8(r))
}

// MarshalText encodes the reason as its String; an unknown value is an
// error.
func (r ClusterTLSReason) MarshalText() ([]byte, error) {
	if int(r) >= len(clusterTLSReasons) || clusterTLSReasons[r] == "" {
		return nil, fmt.Errorf("gateway: unknown cluster TLS reason %d", uint8(r))
	}
	return []byte(clusterTLSReasons[r]), nil
}

// ClusterTLSError is a join that fails at once because the connection to
// an etcd member cannot succeed as configured (see ClusterTLSReason). Its
// message names the endpoint, the reason and the file in question, never
// key material.
type ClusterTLSError struct {
	// Endpoint is the etcd client URL the worker dialled.
	Endpoint string
	// Reason is why the connection cannot succeed.
	Reason ClusterTLSReason
	// File is the client certificate (TLSCertificateRejected) or the CA
	// file (TLSUnknownAuthority) in question; empty when none applies or
	// none was given.
	File string
	// Err is the TLS or x509 error the handshake met; nil for the
	// mismatches between plain and TLS.
	Err error
}

// Error says what is wrong and what to change, with the stable reason in
// parentheses.
func (e *ClusterTLSError) Error() string {
	var what string
	switch e.Reason {
	case TLSCertificateRequired:
		what = "requires a client certificate and none was given (--cluster-cert, --cluster-key)"
	case TLSCertificateRejected:
		what = fmt.Sprintf("rejected the client certificate %s: the member must trust the CA that signed it, and it must be valid for client use", orUnnamed(e.File, "(unnamed)"))
	case TLSUnknownAuthority:
		what = fmt.Sprintf("presented a certificate that the CA %s did not sign (--cluster-ca)", orUnnamed(e.File, "of the system's roots"))
	case TLSNameMismatch:
		what = "presented a certificate that does not name the endpoint's host"
	case TLSMemberCertificateInvalid:
		what = "presented a certificate that is not valid now or not for server use"
	case TLSNotServed:
		what = "serves plain HTTP/2, not TLS: use http:// or give the member a client certificate (etcd --cert-file, --key-file)"
	case TLSRequired:
		what = "serves TLS: use https:// with the cluster's CA (--cluster-ca)"
	case TLSNoCommonParameters:
		what = "and the worker share no TLS version, cipher suite, group or signature scheme: the worker offers TLS 1.2 and 1.3 with Go's default suites; the member's --tls-min-version, --tls-max-version and --cipher-suites must admit one"
	}
	msg := fmt.Sprintf("etcd member %s %s (%s)", redact.URLs(e.Endpoint), what, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the TLS or x509 error.
func (e *ClusterTLSError) Unwrap() error { return e.Err }

func orUnnamed(file, none string) string {
	if file == "" {
		return none
	}
	return file
}
