package admin_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/admin"
)

// TestShutdownClosesUnusedConnectionsAtOnce: net/http waits for a new
// connection until it is five seconds old, so a client that connected and
// said nothing held the shutdown (and a restart's hand-over) that long,
// only for net/http to drop its request unanswered if it came. The server
// now closes such connections at once; an answer already given is kept.
func TestShutdownClosesUnusedConnectionsAtOnce(t *testing.T) {
	e := start(t, setup{})
	addr := strings.TrimPrefix(e.base, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	unused, begun, served := dial(), dial(), dial()
	if _, err := io.WriteString(begun, "GET "+admin.StatusPath+" HTTP/1.1\r\nHost: "+addr+"\r\n"); err != nil {
		t.Fatal(err)
	}
	// served sends a whole request, answered at once; its client reads the
	// answer only after Shutdown began, and it must still be there.
	if _, err := io.WriteString(served, "GET "+admin.StatusPath+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // all three accepted, the bytes read

	start := time.Now()
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- e.srv.Shutdown(ctx)
	}()
	for name, c := range map[string]net.Conn{"unused": unused, "begun": begun} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the %s connection: read %d, %v; want it closed", name, n, err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(served), nil)
	if err != nil {
		t.Fatalf("the request being served: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the request being served: %d", resp.StatusCode)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Generous: net/http's own wait was at least 4 s here.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %v with two connections that had sent no whole request; want well under net/http's 5 s", d)
	}
}
