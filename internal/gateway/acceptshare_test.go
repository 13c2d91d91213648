//go:build unix

package gateway

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestAcceptShareOver(t *testing.T) {
	table := filepath.Join(t.TempDir(), "accept")
	a, err := openAcceptShare(table)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openAcceptShare(table)
	if err != nil {
		t.Fatal(err)
	}
	if a.over() {
		t.Fatal("over with no connection anywhere")
	}
	for range 3 {
		a.opened()
	}
	b.opened()
	if !a.over() || b.over() {
		t.Fatalf("3/1: over a=%v b=%v, want true false", a.over(), b.over())
	}
	a.closed()
	if !a.over() || b.over() {
		t.Fatalf("2/1: over a=%v b=%v, want true false", a.over(), b.over())
	}
	b.opened()
	if a.over() || b.over() {
		t.Fatalf("2/2: over a=%v b=%v, want false false", a.over(), b.over())
	}
	a.opened()
	b.closed()
	b.leave()
	if a.over() {
		t.Fatal("over with no other process in the table")
	}
	b.opened() // after leave: counts nothing
	if got := b.mine.conns.Load(); got != 0 {
		t.Fatalf("a left entry counts %d connections", got)
	}
}

// A worker killed before it could leave its entry does not hold it: the
// next process to open the table frees it.
func TestAcceptShareFreesDeadEntries(t *testing.T) {
	table := filepath.Join(t.TempDir(), "accept")
	a, err := openAcceptShare(table)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := &a.table[5]
	dead.pid.Store(int32(cmd.Process.Pid))
	a.opened()
	a.opened()
	if !a.over() {
		t.Fatal("2/0 with a dead entry: not over")
	}
	if _, err := openAcceptShare(table); err != nil {
		t.Fatal(err)
	}
	if p := dead.pid.Load(); p == int32(cmd.Process.Pid) {
		t.Fatal("the dead process's entry was not freed")
	}
}

// sharedGateway serves a gateway on ln with the accept table at table.
func sharedGateway(t *testing.T, path, table string, ln net.Listener, hold time.Duration) *Gateway {
	t.Helper()
	g, err := New(context.Background(), path, WithAcceptShare(table), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if g.share == nil {
		t.Fatal("no accept table")
	}
	g.share.defer_ = hold
	serveUntilCleanup(t, g, ln, func() {})
	return g
}

// openConns opens n keep-alive connections to addr, each with one request
// answered (so each is accepted), and closes them at the test's end.
func openConns(t *testing.T, addr string, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// sharedListeners returns a listening socket and a second descriptor of
// it, as two worker processes hold it.
func sharedListeners(t *testing.T) (net.Listener, net.Listener) {
	t.Helper()
	a, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// Two workers on one socket: the one that holds every connection leaves
// new ones to the other until their counts are level. Without the table
// each new connection goes to whichever worker accepts first (9 or more
// of 10 to the second one by chance: about 1%).
func TestWorkersBalanceConnections(t *testing.T) {
	dir := t.TempDir()
	path, table := filepath.Join(dir, "reconfd.yaml"), filepath.Join(dir, "accept")
	writeAtomic(t, path, baseConfig)
	lnA, lnB := sharedListeners(t)
	// A long hold: the second worker surely takes what the first leaves,
	// however slowly this machine runs the test.
	a := sharedGateway(t, path, table, lnA, time.Minute)
	openConns(t, lnA.Addr().String(), 10)
	b := sharedGateway(t, path, table, lnB, time.Minute)
	openConns(t, lnA.Addr().String(), 10)
	na, nb := a.share.mine.conns.Load(), b.share.mine.conns.Load()
	// The first worker may take one more: it was waiting in accept
	// before the second one joined the table.
	if na+nb != 20 || nb < 9 {
		t.Fatalf("connections %d/%d, want 10/10 or 11/9", na, nb)
	}
	if a.share.timeout.Load() != 0 {
		t.Fatalf("the first worker took %d connections past its hold", a.share.timeout.Load())
	}
}

// A worker over its share still takes a connection that nobody else takes
// (the other worker is stopped or stuck): after the hold, not never.
func TestAcceptShareTakesWhatNobodyTakes(t *testing.T) {
	dir := t.TempDir()
	path, table := filepath.Join(dir, "reconfd.yaml"), filepath.Join(dir, "accept")
	writeAtomic(t, path, baseConfig)
	lnA, lnB := sharedListeners(t)
	defer lnB.Close()
	a := sharedGateway(t, path, table, lnA, 20*time.Millisecond)
	// A second worker's entry, with no server behind it.
	idle, err := openAcceptShare(table)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.leave()
	openConns(t, lnA.Addr().String(), 4)
	if got := a.share.mine.conns.Load(); got != 4 {
		t.Fatalf("the worker holds %d connections, want 4", got)
	}
	if a.share.timeout.Load() == 0 {
		t.Fatal("no connection waited for the hold: the worker was never over its share")
	}
	// Once the idle entry leaves (its worker drains), nothing waits.
	idle.leave()
	before := a.share.timeout.Load()
	openConns(t, lnA.Addr().String(), 4)
	if got := a.share.timeout.Load(); got != before {
		t.Fatalf("%d connections waited after the other entry left", got-before)
	}
}

// A draining worker leaves the table: its connections are moving away.
func TestDrainLeavesAcceptShare(t *testing.T) {
	dir := t.TempDir()
	path, table := filepath.Join(dir, "reconfd.yaml"), filepath.Join(dir, "accept")
	writeAtomic(t, path, baseConfig)
	lnA, lnB := sharedListeners(t)
	a := sharedGateway(t, path, table, lnA, time.Minute)
	b := sharedGateway(t, path, table, lnB, time.Minute)
	pid := b.share.mine.pid.Load()
	b.Drain()
	if b.share.mine.pid.Load() == pid {
		t.Fatal("a draining worker kept its entry")
	}
	openConns(t, lnA.Addr().String(), 3)
	if a.share.over() {
		t.Fatal("over its share with the only other worker draining")
	}
}

// A worker over its share with no connection waiting parks its accept
// loop in the runtime's poller: it holds no thread in a system call (with
// one P per worker, a blocking poll(2) kept the P from the worker's
// requests until sysmon took it back, up to 10 ms later) and does not
// wake on a timer.
func TestAcceptShareWaitParks(t *testing.T) {
	dir := t.TempDir()
	path, table := filepath.Join(dir, "reconfd.yaml"), filepath.Join(dir, "accept")
	writeAtomic(t, path, baseConfig)
	lnA, lnB := sharedListeners(t)
	defer lnB.Close()
	sharedGateway(t, path, table, lnA, time.Minute)
	idle, err := openAcceptShare(table)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.leave()
	// Within the share at 0/0; with 1/0 the worker is over it.
	openConns(t, lnA.Addr().String(), 1)
	// Each check of the queue is a poll(2) that does not wait, so a
	// snapshot may catch the loop inside one (runnable, or in a system
	// call); waiting, it must be parked in the poller. A loop that waited
	// in a system call would never show as IO wait.
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stack := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stack, "\n\n") {
			if !strings.Contains(g, "(*listenQueue).pending") {
				continue
			}
			if strings.Contains(g, "[IO wait") {
				return
			}
			last = g
		}
		if time.Now().After(deadline) {
			if last == "" {
				t.Fatal("the accept loop never waited for its share")
			}
			t.Fatalf("the accept loop waits outside the poller:\n%s", last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A worker that dies after the others opened the table (kill -9, or a new
// worker of a failed restart, killed before it served) leaves its entry
// behind until a new process opens the table. A survivor over its share
// against that dead entry held every new connection for the whole hold,
// one at a time in its accept loop, for as long as no worker started (a
// slot whose replacement cannot start: indefinitely). The first hold
// frees the dead entry instead, and the connection is taken at once.
func TestAcceptShareDeadPeerDoesNotHold(t *testing.T) {
	dir := t.TempDir()
	path, table := filepath.Join(dir, "reconfd.yaml"), filepath.Join(dir, "accept")
	writeAtomic(t, path, baseConfig)
	lnA, lnB := sharedListeners(t)
	defer lnB.Close()
	// A hold longer than openConns's read deadline: a connection held
	// for it fails the test.
	a := sharedGateway(t, path, table, lnA, time.Minute)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := &a.share.table[len(a.share.table)-1]
	dead.pid.Store(int32(cmd.Process.Pid))
	dead.conns.Store(1)
	openConns(t, lnA.Addr().String(), 4)
	if p := dead.pid.Load(); p != 0 {
		t.Fatalf("the dead process's entry (pid %d) is still in the table", p)
	}
	if n := a.share.timeout.Load(); n != 0 {
		t.Fatalf("%d connections were taken only after the hold", n)
	}
}
