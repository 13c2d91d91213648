package gateway

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestJoinGivesUpWithAReason: a join whose members never answer (a port
// that refuses connections, and one that accepts and says nothing) gives
// up when its wait runs out with cluster_unreachable, naming the
// endpoints and the wait, not a bare "context deadline exceeded"; a
// worker's join (lease grant) and a supervisor's (login, then a read)
// alike.
func TestJoinGivesUpWithAReason(t *testing.T) {
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr
	}()
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	// Cleanup, not defer: the parallel subtests run after this function
	// returns.
	t.Cleanup(func() { mute.Close(); <-done })
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	const wait = time.Second
	for _, tc := range []struct {
		name string
		join func(ClusterOptions) error
	}{
		{"worker", func(o ClusterOptions) error {
			st, err := joinCluster(context.Background(), o, quietLogger(), wait)
			if err == nil {
				st.abandon(context.Background())
			}
			return err
		}},
		{"supervisor", func(o ClusterOptions) error {
			cli, err := connectCluster(context.Background(), o, quietLogger(), wait)
			if err == nil {
				cli.Close()
			}
			return err
		}},
	} {
		for _, ep := range []string{refused, "http://" + mute.Addr().String()} {
			for _, user := range []string{"", "fleet"} {
				t.Run(tc.name+"/"+ep+"/"+user, func(t *testing.T) {
					t.Parallel() // each waits out its bound, mostly asleep
					o := ClusterOptions{Endpoints: []string{ep}, Username: user, Password: "pw-" + user}
					start := time.Now()
					err := tc.join(o)
					took := time.Since(start)
					var ue *ClusterUnreachableError
					if !errors.As(err, &ue) {
						t.Fatalf("got %v, want a *ClusterUnreachableError", err)
					}
					msg := err.Error()
					if !strings.Contains(msg, "("+ReasonClusterUnreachable+")") || !strings.Contains(msg, ep) || !strings.Contains(msg, wait.String()) {
						t.Errorf("message %q does not give the reason, the endpoint and the wait", msg)
					}
					if user != "" && strings.Contains(msg, "pw-") {
						t.Errorf("message %q shows the password", msg)
					}
					if took < wait {
						t.Errorf("gave up after %v, before the wait of %v", took, wait)
					}
				})
			}
		}
	}
}

// TestJoinErrorsHideCredentials: an endpoint URL that carries a user and
// password (a library caller may pass one) is named in every join
// error without them.
func TestJoinErrorsHideCredentials(t *testing.T) {
	const ep = "http://fleet:s3cret-pw@10.0.0.1:2379"
	for _, err := range []error{
		&ClusterUnreachableError{Endpoints: []string{ep}, Wait: time.Second},
		&ClusterAuthError{Endpoints: []string{ep}, User: "fleet", Reason: AuthFailed},
		&ClusterTLSError{Endpoint: ep, Reason: TLSRequired},
	} {
		if msg := err.Error(); strings.Contains(msg, "s3cret-pw") || !strings.Contains(msg, "10.0.0.1:2379") {
			t.Errorf("%T: %q shows the password or hides the host", err, msg)
		}
	}
}
