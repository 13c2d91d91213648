package gateway

import (
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/internal/redact"
)

// ClusterAuthReason says why etcd refuses a worker's user. No retry cures
// any of them until the credentials or the user's grants change, so a
// join that meets one fails at once. It is a closed enum; its String is
// the stable reason an operator sees and a script may match.
type ClusterAuthReason uint8

// The reasons of a ClusterAuthError.
const (
	// AuthFailed: etcd refused the user name and password (an unknown
	// user, or a wrong password).
	AuthFailed ClusterAuthReason = iota + 1
	// AuthRequired: the cluster has authentication enabled and the worker
	// gave no user, or gave one with an empty password, which etcd's
	// client does not send.
	AuthRequired
	// AuthPermissionDenied: etcd let the user in but refused it a request
	// the fleet makes on its prefix: its roles lack a grant.
	AuthPermissionDenied
)

var clusterAuthReasons = [...]string{
	AuthFailed:           "cluster_auth_failed",
	AuthRequired:         "cluster_auth_required",
	AuthPermissionDenied: "cluster_auth_permission_denied",
}

// String returns the stable reason, such as "cluster_auth_failed".
func (r ClusterAuthReason) String() string {
	if int(r) < len(clusterAuthReasons) && clusterAuthReasons[r] != "" {
		return clusterAuthReasons[r]
	}
	return fmt.Sprintf("ClusterAuthReason(%d)", uint8(r))
}

// MarshalText encodes the reason as its String; an unknown value is an
// error.
func (r ClusterAuthReason) MarshalText() ([]byte, error) {
	if int(r) >= len(clusterAuthReasons) || clusterAuthReasons[r] == "" {
		return nil, fmt.Errorf("gateway: unknown cluster auth reason %d", uint8(r))
	}
	return []byte(clusterAuthReasons[r]), nil
}

// ClusterAuthError is a join that fails at once because etcd refuses the
// worker's user (see ClusterAuthReason). Its message names the endpoints,
// the user and the reason, never the password.
type ClusterAuthError struct {
	// Endpoints are the etcd client URLs the worker reached: the whole
	// cluster's, since its members share one user store.
	Endpoints []string
	// User is the etcd user the worker gave; empty for none.
	User string
	// CertFile is the worker's client certificate, if any: without a
	// User, etcd takes the certificate's common name as the user.
	CertFile string
	// EmptyPassword is set when User was given with an empty password
	// (AuthRequired).
	EmptyPassword bool
	// Reason is why etcd refuses the user.
	Reason ClusterAuthReason
	// Err is etcd's answer; for AuthPermissionDenied it names the grants
	// a fleet's user needs.
	Err error
}

// Error says what is wrong and what to change, with the stable reason in
// parentheses.
func (e *ClusterAuthError) Error() string {
	var what string
	switch e.Reason {
	case AuthFailed:
		what = fmt.Sprintf("refused user %q: the user is unknown or the password wrong (--cluster-user, --cluster-password)", e.User)
	case AuthRequired:
		what = "requires a user and none was given (--cluster-user, --cluster-password)"
		if e.EmptyPassword {
			what = fmt.Sprintf("requires a user, and user %q was given with an empty password, which is not sent (--cluster-password)", e.User)
		}
	case AuthPermissionDenied:
		what = fmt.Sprintf("refused %s a request the fleet makes: the user's roles lack a grant", e.who())
	}
	msg := fmt.Sprintf("etcd at %s %s (%s)", redact.URLs(strings.Join(e.Endpoints, ",")), what, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// who names the user etcd refused.
func (e *ClusterAuthError) who() string {
	switch {
	case e.User != "":
		return fmt.Sprintf("user %q", e.User)
	case e.CertFile != "":
		return fmt.Sprintf("the user the client certificate %s names (its common name)", e.CertFile)
	}
	return "the worker's user"
}

// Unwrap returns etcd's answer.
func (e *ClusterAuthError) Unwrap() error { return e.Err }

// authFault returns err as a *ClusterAuthError, and true, when it is
// etcd refusing the user of c (cli, when set, is the client that reached
// it). It classifies by etcd's error values, never by message text.
func authFault(c ClusterOptions, cli *clientv3.Client, err error) (error, bool) {
	var r ClusterAuthReason
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		r = AuthFailed
	case errors.Is(err, rpctypes.ErrUserEmpty):
		r = AuthRequired
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		r = AuthPermissionDenied
	default:
		return err, false
	}
	eps := c.Endpoints
	if len(eps) == 0 && cli != nil {
		eps = cli.Endpoints()
	}
	e := &ClusterAuthError{Endpoints: eps, User: c.Username, CertFile: c.CertFile, Reason: r, Err: err}
	if r == AuthRequired && c.Username != "" && c.Password == "" {
		e.EmptyPassword = true
	}
	return e, true
}
