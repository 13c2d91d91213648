package gateway

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// fdReserve is how many file descriptors the connection cap never hands to
// clients: the listening sockets, the management API's connections, the
// files a reload reads (the configuration, secrets, system prompts), the
// cluster's etcd connections and the log. With them kept, a process whose
// cap is full still reloads and still answers management.
const fdReserve = 64

// connCap bounds the data plane's open client connections: in total, and
// per client address. A connection past either bound is closed at once,
// before a byte is read (a client retries on another worker or later);
// the shed is counted and logged, at most once per logEvery per bound.
//
// The total's default derives from the descriptor limit the process had
// at start (the soft RLIMIT_NOFILE, which the Go runtime raises to the hard
// one): half of what the reserve leaves, since every client connection
// proxied to an openai backend needs a second descriptor for its upstream
// connection. An explicit server.max_connections is used as given up to
// the limit less the reserve, and clamped there (logged).
//
// The per-address bound is off unless server.max_connections_per_address
// sets it: behind an ingress or a load balancer every client arrives from
// the proxy's few addresses, and a per-address default below the total
// would shed ordinary traffic. An IPv6 client counts by its /64, the
// smallest prefix a host is usually given.
//
// Its methods are safe for concurrent use.
type connCap struct {
	limits  func() *ServerConfig // the active generation's server section
	ceiling int                  // the descriptor limit less fdReserve
	auto    int                  // the total's default

	mu      sync.Mutex
	open    int
	perAddr map[netip.Addr]int32

	shedTotal, shedAddr, backoffs atomic.Uint64
	logTotal, logAddr, logBackoff everyLog
	clamped                       atomic.Int64 // the last max_connections logged as clamped
	log                           *slog.Logger
}

// newConnCap returns a cap for a process whose descriptor limit is fds.
func newConnCap(fds uint64, limits func() *ServerConfig, log *slog.Logger) *connCap {
	const most = 1 << 24 // an unlimited descriptor limit
	ceiling := int(min(fds, most)) - fdReserve
	ceiling = max(ceiling, 1)
	return &connCap{limits: limits, ceiling: ceiling, auto: max(ceiling/2, 1), perAddr: map[netip.Addr]int32{}, log: log}
}

// bounds returns the effective total and per-address bounds (0: none) of
// the active generation.
func (c *connCap) bounds() (total, perAddr int) {
	s := c.limits()
	total = c.auto
	if s.MaxConnections > 0 {
		total = min(s.MaxConnections, c.ceiling)
		if s.MaxConnections > c.ceiling && c.clamped.Swap(int64(s.MaxConnections)) != int64(s.MaxConnections) {
			c.log.Warn("server.max_connections is above what the descriptor limit allows; using the limit less the reserve",
				"max_connections", s.MaxConnections, "used", c.ceiling, "reserve", fdReserve)
		}
	}
	if s.MaxConnectionsPerAddress > 0 {
		perAddr = min(s.MaxConnectionsPerAddress, total)
	}
	return total, perAddr
}

// admit counts conn as open and reports true, or reports false when a
// bound is full (the caller closes it).
func (c *connCap) admit(conn net.Conn) bool {
	total, per := c.bounds()
	addr := clientKey(conn)
	c.mu.Lock()
	switch {
	case c.open >= total:
		c.mu.Unlock()
		c.shedTotal.Add(1)
		if n, ok := c.logTotal.allow(); ok {
			c.log.Warn("a data-plane connection was closed at once: this process holds server.max_connections",
				"max_connections", total, "closed", n, "metric", "reconfd_connections_shed_total")
		}
		return false
	case per > 0 && addr.IsValid() && int(c.perAddr[addr]) >= per:
		c.mu.Unlock()
		c.shedAddr.Add(1)
		if n, ok := c.logAddr.allow(); ok {
			c.log.Warn("a data-plane connection was closed at once: its client address holds server.max_connections_per_address",
				"address", addr.String(), "max_connections_per_address", per, "closed", n, "metric", "reconfd_connections_shed_total")
		}
		return false
	}
	c.open++
	if addr.IsValid() {
		c.perAddr[addr]++
	}
	c.mu.Unlock()
	return true
}

// release uncounts conn, which admit counted.
func (c *connCap) release(conn net.Conn) {
	addr := clientKey(conn)
	c.mu.Lock()
	c.open--
	if addr.IsValid() {
		if n := c.perAddr[addr] - 1; n > 0 {
			c.perAddr[addr] = n
		} else {
			delete(c.perAddr, addr)
		}
	}
	c.mu.Unlock()
}

// openConns returns how many connections are counted open.
func (c *connCap) openConns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// backedOff counts and logs one pause of the accept loop after err.
func (c *connCap) backedOff(err error, pause time.Duration) {
	c.backoffs.Add(1)
	if n, ok := c.logBackoff.allow(); ok {
		c.log.Warn("the data plane cannot accept a connection: the process or the system is out of file descriptors; retrying",
			"error", err, "retry_in", pause.String(), "pauses", n, "metric", "reconfd_accept_backoffs_total")
	}
}

// clientKey is the address a connection counts against: its peer's IP,
// an IPv6 one reduced to its /64; the zero Addr for a peer that is not
// IP (it counts in the total only).
func clientKey(conn net.Conn) netip.Addr {
	ta, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	a := ta.AddrPort().Addr().Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}

// logEvery is the shortest time between two log lines of one kind of
// shed or pause: a flood writes a line every logEvery, not one per
// connection.
const logEvery = 10 * time.Second

// everyLog rate-limits one kind of log line.
type everyLog struct {
	next  atomic.Int64 // unix nanoseconds before which nothing is logged
	count atomic.Uint64
}

// allow counts one event and reports whether to log it, with the events
// since the last line (this one included).
func (e *everyLog) allow() (uint64, bool) {
	e.count.Add(1)
	now := time.Now().UnixNano()
	next := e.next.Load()
	if now < next || !e.next.CompareAndSwap(next, now+int64(logEvery)) {
		return 0, false
	}
	return e.count.Swap(0), true
}

// unknownFDLimit stands for the descriptor limit of a platform that has
// none to read.
const unknownFDLimit = 1 << 16

func fdLimitOr(n uint64) uint64 {
	if n == 0 {
		return unknownFDLimit
	}
	return n
}
