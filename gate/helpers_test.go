package gate

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// TestMain checks that no goroutine outlives the tests: every gate, etcd
// client and embedded member is stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testTTL is the lease time of the cluster tests: short, so that a dead
// worker's slots and a cut-off fallback are seen within seconds, and
// above etcd's minimum for the member's timings (1.5 x 500ms).
const testTTL = 2 * time.Second

// startEtcd runs a real single-member etcd on free loopback ports with
// its data in a temporary directory. It is a one-member Cluster so that a
// test can stop it and start it again on the same ports.
func startEtcd(t testing.TB) *embedded.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embedded.StartCluster(ctx, 1, embedded.Config{
		Dir: t.TempDir(), Logger: quiet, TickMs: 50, ElectionMs: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
		// Reconnect within 300ms of etcd coming back, not after gRPC's
		// default backoff (up to two minutes): the rejoin tests need every
		// worker back before its lease runs out.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 300 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// worker is one in-process cluster worker: a Gate on its own client.
type worker struct {
	g    *Gate
	cli  *clientv3.Client
	dead bool
}

// startWorkers starts n gates on their own clients against endpoints.
// Cleanup closes them (with a short deadline: etcd may be gone) and their
// clients.
func startWorkers(t testing.TB, endpoints []string, n int, opts ...Option) []*worker {
	t.Helper()
	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = startWorker(t, endpoints, opts...)
	}
	return ws
}

func startWorker(t testing.TB, endpoints []string, opts ...Option) *worker {
	t.Helper()
	return startWorkerOn(t, newClient(t, endpoints), opts...)
}

// startWorkerOn starts a gate on cli, which it closes at cleanup.
func startWorkerOn(t testing.TB, cli *clientv3.Client, opts ...Option) *worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	g, err := New(ctx, cli, append([]Option{WithTTL(testTTL), WithLogger(quiet)}, opts...)...)
	cancel()
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	w := &worker{g: g, cli: cli}
	t.Cleanup(func() {
		if w.dead {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		w.g.Close(ctx)
		cancel()
		w.cli.Close()
	})
	return w
}

// proxy forwards TCP from a loopback port to target until cut, so that a
// test can partition one worker from etcd while the others still reach it.
type proxy struct {
	target, addr string
	delay        time.Duration // added to every byte, each way (slowProxy)

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	return startSlowProxy(t, target, 0)
}

// startSlowProxy is a fault injection: a proxy that delivers every byte
// d late in each direction, as an etcd too loaded to answer within a
// renewal period would; throughput is not limited.
func startSlowProxy(t testing.TB, target string, d time.Duration) *proxy {
	t.Helper()
	p := &proxy{target: strings.TrimPrefix(target, "http://"), delay: d, conns: make(map[net.Conn]struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) endpoint() []string { return []string{"http://" + p.addr} }

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[u] = struct{}{}, struct{}{}
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(u, c); u.Close(); c.Close() })
			p.wg.Go(func() { p.pipe(c, u); u.Close(); c.Close() })
		}
	})
}

// pipe copies src to dst, each chunk p.delay after it was read.
func (p *proxy) pipe(dst, src net.Conn) {
	if p.delay == 0 {
		io.Copy(dst, src)
		return
	}
	type chunk struct {
		due time.Time
		b   []byte
	}
	ch := make(chan chunk, 4096)
	p.wg.Go(func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now().Add(p.delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	})
	broken := false
	for c := range ch { // drained to the end, so that the reader never blocks
		if broken {
			continue
		}
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.b); err != nil {
			broken = true
			src.Close()
		}
	}
}

// cut closes the listener and every connection: the worker's client sees
// its endpoint refuse connections.
func (p *proxy) cut() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}

// restore listens again on the same port.
func (p *proxy) restore(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

// kill stops the worker as a crash would: its goroutines end without
// releasing anything and its client closes; its lease is left to expire.
func (w *worker) kill() {
	w.dead = true
	w.g.cancel()
	w.g.wg.Wait()
	w.cli.Close()
}

// peak tracks the number of requests in flight across every worker, as a
// counting upstream would.
type peak struct {
	cur, max atomic.Int64
}

func (p *peak) enter() {
	c := p.cur.Add(1)
	for {
		m := p.max.Load()
		if c <= m || p.max.CompareAndSwap(m, c) {
			return
		}
	}
}

func (p *peak) leave() { p.cur.Add(-1) }

// reset starts a new measurement from the current in-flight count.
func (p *peak) reset() { p.max.Store(p.cur.Load()) }

// load runs clients goroutines per limiter, each acquiring, holding for
// hold and releasing, until stop is called.
type load struct {
	p       *peak
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	wg      sync.WaitGroup
	served  atomic.Int64
	timeout atomic.Int64
}

func startLoad(lims []*Limiter, clients int, hold time.Duration, p *peak) *load {
	l := &load{p: p, done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	for _, lim := range lims {
		for range clients {
			l.wg.Go(func() {
				for {
					select {
					case <-l.done:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
					s, err := lim.Acquire(ctx)
					cancel()
					if err != nil {
						l.timeout.Add(1)
						continue
					}
					p.enter()
					select {
					case <-time.After(hold):
					case <-l.done:
					}
					p.leave()
					s.Release()
					l.served.Add(1)
				}
			})
		}
	}
	return l
}

func (l *load) stop() {
	close(l.done)
	l.cancel()
	l.wg.Wait()
}

// eventually polls cond every 5ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
