package gateway

import (
	"log/slog"

	"bufio"
	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// capConfig is baseConfig with the connection bounds set.
func capConfig(total, perAddr string) string {
	return strings.Replace(baseConfig, "server:\n", "server:\n  max_connections: "+total+"\n  max_connections_per_address: "+perAddr+"\n", 1)
}

// dialFrom opens a connection to addr from the local address from ("" for
// any) and proves it served by asking /healthz on it.
func dialFrom(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// healthz asks GET /healthz on c and returns the status, or 0 when the
// connection was closed without an answer.
func healthz(t *testing.T, c net.Conn) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer and no close: %v", err)
		}
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestConnectionCapShedsTheExcess(t *testing.T) {
	tg := startGateway(t, capConfig("2", "0"))
	addr := strings.TrimPrefix(tg.url, "http://")
	a, b := dialFrom(t, addr, ""), dialFrom(t, addr, "")
	for _, c := range []net.Conn{a, b} {
		if got := healthz(t, c); got != 200 {
			t.Fatalf("a connection within the cap: got %d, want 200", got)
		}
	}
	if got := healthz(t, dialFrom(t, addr, "")); got != 0 {
		t.Fatalf("a third connection over max_connections 2: got %d, want it closed at once", got)
	}
	if got := tg.caps.shedTotal.Load(); got != 1 {
		t.Errorf("shed over max_connections: got %d, want 1", got)
	}
	if !strings.Contains(tg.logs.String(), "server.max_connections") {
		t.Errorf("no log line names server.max_connections:\n%s", tg.logs.String())
	}
	metrics := gather(t, tg.Gateway)
	for _, want := range []string{`reconfd_connections_shed_total{bound="max_connections"} 1`, "reconfd_connections_max 2", "reconfd_connections_open 2"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	// A closed connection frees its place.
	a.Close()
	waitFor(t, "the closed connection to be uncounted", func() bool { return tg.caps.openConns() == 1 })
	if got := healthz(t, dialFrom(t, addr, "")); got != 200 {
		t.Fatalf("a connection after one closed: got %d, want 200", got)
	}
	// The bound is live: a reload raises it for the next connection.
	if res := tg.reload(capConfig("3", "0")); !res.Outcome.OK() {
		t.Fatalf("reload: %s (%s)", res.Outcome, res.Reason)
	}
	if got := healthz(t, dialFrom(t, addr, "")); got != 200 {
		t.Fatalf("a connection after max_connections was raised to 3: got %d, want 200", got)
	}
}

func TestConnectionCapPerAddress(t *testing.T) {
	tg := startGateway(t, capConfig("0", "1"))
	addr := strings.TrimPrefix(tg.url, "http://")
	if got := healthz(t, dialFrom(t, addr, "127.0.0.1")); got != 200 {
		t.Fatalf("a first connection: got %d, want 200", got)
	}
	if got := healthz(t, dialFrom(t, addr, "127.0.0.1")); got != 0 {
		t.Fatalf("a second connection from one address with max_connections_per_address 1: got %d, want it closed at once", got)
	}
	if got := healthz(t, dialFrom(t, addr, "127.0.0.2")); got != 200 {
		t.Fatalf("a connection from another address: got %d, want 200", got)
	}
	if got := tg.caps.shedAddr.Load(); got != 1 {
		t.Errorf("shed over max_connections_per_address: got %d, want 1", got)
	}
	if !strings.Contains(tg.logs.String(), "server.max_connections_per_address") {
		t.Errorf("no log line names server.max_connections_per_address:\n%s", tg.logs.String())
	}
}

func TestConnectionCapBounds(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		fds                  uint64
		total, perAddr       int
		wantTotal, wantPerAd int
	}{
		{"default: half the limit less the reserve", 1024, 0, 0, 480, 0},
		{"default at the common container limit", 1 << 20, 0, 0, (1<<20 - fdReserve) / 2, 0},
		{"explicit within the limit", 1024, 900, 0, 900, 0},
		{"explicit above the limit is clamped", 1024, 5000, 0, 1024 - fdReserve, 0},
		{"per address within the total", 1024, 100, 10, 100, 10},
		{"per address above the total is the total", 1024, 100, 500, 100, 100},
		{"a tiny limit still admits one", 10, 0, 0, 1, 0},
		{"an unknown limit", fdLimitOr(0), 0, 0, (unknownFDLimit - fdReserve) / 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &ServerConfig{MaxConnections: tc.total, MaxConnectionsPerAddress: tc.perAddr}
			c := newConnCap(tc.fds, func() *ServerConfig { return s }, discardLogger())
			total, per := c.bounds()
			if total != tc.wantTotal || per != tc.wantPerAd {
				t.Errorf("bounds: got %d, %d, want %d, %d", total, per, tc.wantTotal, tc.wantPerAd)
			}
		})
	}
}

func TestClientKeyGroupsIPv6By64(t *testing.T) {
	a := clientKey(fakeAddrConn{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 1}})
	b := clientKey(fakeAddrConn{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:bbbb::2"), Port: 2}})
	c := clientKey(fakeAddrConn{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 3}})
	v4 := clientKey(fakeAddrConn{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 4}})
	if a != b || a == c {
		t.Errorf("IPv6 keys: %v %v %v, want the first two equal and the third apart", a, b, c)
	}
	if v4.String() != "10.0.0.1" {
		t.Errorf("a mapped IPv4 address: got %v, want 10.0.0.1", v4)
	}
}

// fakeAddrConn is a connection that only has a peer address.
type fakeAddrConn struct{ raddr net.Addr }

func (c fakeAddrConn) RemoteAddr() net.Addr           { return c.raddr }
func (fakeAddrConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (fakeAddrConn) Write(b []byte) (int, error)      { return len(b), nil }
func (fakeAddrConn) Close() error                     { return nil }
func (fakeAddrConn) LocalAddr() net.Addr              { return nil }
func (fakeAddrConn) SetDeadline(time.Time) error      { return nil }
func (fakeAddrConn) SetReadDeadline(time.Time) error  { return nil }
func (fakeAddrConn) SetWriteDeadline(time.Time) error { return nil }

// exhaustingListener injects faults: its first accepts fail with the
// errors in errs, as accept4 does when descriptors run out, before the
// real listener's accept.
type exhaustingListener struct {
	net.Listener
	errs  []error
	calls atomic.Int32
}

func (l *exhaustingListener) Accept() (net.Conn, error) {
	if i := int(l.calls.Add(1)) - 1; i < len(l.errs) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: &osSyscallError{l.errs[i]}}
	}
	return l.Listener.Accept()
}

// osSyscallError wraps an errno as os.SyscallError does.
type osSyscallError struct{ err error }

func (e *osSyscallError) Error() string { return "accept4: " + e.err.Error() }
func (e *osSyscallError) Unwrap() error { return e.err }

func TestAcceptBacksOffWhenDescriptorsRunOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, path, baseConfig)
	logs := &logBuffer{}
	g, err := New(context.Background(), path, WithLogger(newTestLogger(logs)))
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &exhaustingListener{Listener: real, errs: []error{syscall.EMFILE, syscall.ENFILE, syscall.EMFILE, syscall.ENOBUFS, syscall.ENOMEM}}
	serveUntilCleanup(t, g, ln, func() {})
	c := dialFrom(t, real.Addr().String(), "")
	if got := healthz(t, c); got != 200 {
		t.Fatalf("after five exhausted accepts: got %d, want 200", got)
	}
	if got := g.caps.backoffs.Load(); got != 5 {
		t.Errorf("pauses: got %d, want 5", got)
	}
	if n := strings.Count(logs.String(), "out of file descriptors"); n != 1 {
		t.Errorf("log lines about the pauses: got %d, want 1 (rate-limited):\n%s", n, logs.String())
	}
}

func TestAcceptPauseEndsOnClose(t *testing.T) {
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = syscall.EMFILE
	}
	l := newRawListener(&exhaustingListener{Listener: real, errs: errs}, nil, nil)
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		done <- err
	}()
	waitFor(t, "the loop to pause a few times", func() bool { return l.Listener.(*exhaustingListener).calls.Load() > 3 })
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close during a pause: got %v, want net.ErrClosed", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// gather returns the gateway's metrics in the text exposition format.
func gather(t *testing.T, g *Gateway) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
