package gateway

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reconfhq/reconf/internal/testetcd"
	"github.com/reconfhq/reconf/propagate/embedded"
)

// authMember starts an etcd member with authentication enabled and these
// users (password "pw-" + name): fleet, granted the default cluster
// prefix; bare, granted nothing; record, granted the channel's record and
// witness alone, so etcd lets it join the channel but refuses its row.
func authMember(t *testing.T) *embedded.Cluster {
	t.Helper()
	c := testetcd.StartCluster(t, 1, embedded.Config{BcryptCost: 4})
	p := DefaultClusterPrefix
	testetcd.EnableAuth(t, c.Endpoints(),
		[]testetcd.Role{
			{Name: "fleet", Ranges: []testetcd.Range{testetcd.Prefix(p + "/")}},
			{Name: "record", Ranges: []testetcd.Range{{Key: p + "/config", End: p + "/config/by\x00"}}},
		},
		[]testetcd.User{
			{Name: "bare", Password: "pw-bare"},
			{Name: "fleet", Password: "pw-fleet", Roles: []string{"fleet"}},
			{Name: "record", Password: "pw-record", Roles: []string{"record"}},
		})
	return c
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestClusterJoinRefusedUser joins a member with authentication enabled
// with each kind of user etcd refuses: New fails at once with the reason,
// naming the endpoint and the user and never the password, and a user
// with the fleet's grants joins.
func TestClusterJoinRefusedUser(t *testing.T) {
	c := authMember(t)
	ep := c.Endpoints()[0]
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, baseConfig)
	for _, tc := range []struct {
		name, user, password string
		want                 ClusterAuthReason
		grants               bool // the message names the grants a fleet needs
	}{
		{name: "wrong password", user: "fleet", password: "not-the-password", want: AuthFailed},
		{name: "unknown user", user: "nobody", password: "pw-nobody", want: AuthFailed},
		{name: "no user", want: AuthRequired},
		{name: "empty password", user: "fleet", want: AuthRequired},
		{name: "no grants", user: "bare", password: "pw-bare", want: AuthPermissionDenied, grants: true},
		{name: "the record's grants alone", user: "record", password: "pw-record", want: AuthPermissionDenied, grants: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), gateJoinTimeout/2)
			defer cancel()
			_, err := New(ctx, path, WithLogger(quietLogger()),
				WithCluster(ClusterOptions{Endpoints: []string{ep}, Username: tc.user, Password: tc.password}))
			var ae *ClusterAuthError
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
			msg := err.Error()
			switch {
			case ae.Reason != tc.want || ae.User != tc.user:
				t.Errorf("got %s for user %q, want %s for %q: %v", ae.Reason, ae.User, tc.want, tc.user, err)
			case !strings.Contains(msg, ep) || !strings.Contains(msg, "("+tc.want.String()+")"):
				t.Errorf("got %q, want the endpoint %s and the reason", msg, ep)
			case tc.user != "" && !strings.Contains(msg, `"`+tc.user+`"`):
				t.Errorf("got %q, want the user named", msg)
			case tc.password != "" && strings.Contains(msg, tc.password):
				t.Errorf("got %q: the password is printed", msg)
			case tc.grants != strings.Contains(msg, "one grant on the prefix "+DefaultClusterPrefix+"/"):
				t.Errorf("got %q, want the grants named: %t", msg, tc.grants)
			}
			if !tc.grants {
				return
			}
			// Every prefix a worker writes is named, not only the
			// channel's: granted the channel's alone, the next refusal
			// would be the gate's or a cooldown's.
			for _, p := range WorkerPrefixes(DefaultClusterPrefix) {
				if !strings.Contains(msg, p) {
					t.Errorf("got %q, want the prefix %s named", msg, p)
				}
			}
		})
	}
	g, err := New(context.Background(), path, WithLogger(quietLogger()),
		WithCluster(ClusterOptions{Endpoints: []string{ep}, Username: "fleet", Password: "pw-fleet"}))
	if err != nil {
		t.Fatalf("the fleet's user: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Error(err)
	}
}

// TestClusterJoinWithUserWaitsForMember starts a gateway with a user while
// its member is down for longer than etcd's client waits for a login
// (5 s): the join keeps trying, and completes once the member is back.
func TestClusterJoinWithUserWaitsForMember(t *testing.T) {
	c := testetcd.StartCluster(t, 1, embedded.Config{})
	joinsWhenMemberReturns(t, c, ClusterOptions{Endpoints: c.Endpoints(), Username: "fleet", Password: "pw-fleet"}, 6*time.Second)
}

// TestClusterAuthErrorNamesTheUser: a refusal names the user given, or,
// without one, the client certificate whose common name etcd takes as
// the user.
func TestClusterAuthErrorNamesTheUser(t *testing.T) {
	for _, tc := range []struct {
		e    ClusterAuthError
		want string
	}{
		{ClusterAuthError{User: "fleet", CertFile: "/etc/c.pem"}, `refused user "fleet" a request`},
		{ClusterAuthError{CertFile: "/etc/c.pem"}, "refused the user the client certificate /etc/c.pem names (its common name) a request"},
		{ClusterAuthError{}, "refused the worker's user a request"},
	} {
		tc.e.Endpoints, tc.e.Reason = []string{"https://h1:2379", "https://h2:2379"}, AuthPermissionDenied
		want := "etcd at https://h1:2379,https://h2:2379 " + tc.want
		if got := tc.e.Error(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "(cluster_auth_permission_denied)") {
			t.Errorf("got %q, want %q ... (cluster_auth_permission_denied)", got, want)
		}
	}
}

// TestLoginMayPass: a login that meets no member or no leader is tried
// again; one that etcd refuses, or that meets anything else, is not.
func TestLoginMayPass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("login: %w", context.DeadlineExceeded), true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTimeoutDueToLeaderFail, true},
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrTooManyRequests, true},
		{rpctypes.ErrAuthFailed, false},
		{rpctypes.ErrUserEmpty, false},
		{rpctypes.ErrPermissionDenied, false},
		{context.Canceled, false},
		{errors.New("anything else"), false},
	} {
		if got := loginMayPass(tc.err); got != tc.want {
			t.Errorf("%v: got %t, want %t", tc.err, got, tc.want)
		}
	}
}

func TestClusterAuthReasonText(t *testing.T) {
	want := map[ClusterAuthReason]string{
		AuthFailed:           "cluster_auth_failed",
		AuthRequired:         "cluster_auth_required",
		AuthPermissionDenied: "cluster_auth_permission_denied",
	}
	for r := ClusterAuthReason(0); r <= AuthPermissionDenied+1; r++ {
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
	if len(want) != int(AuthPermissionDenied) {
		t.Errorf("the table misses a reason")
	}
}
