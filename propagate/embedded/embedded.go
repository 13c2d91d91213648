// Package embedded runs etcd inside the process, on loopback only, as the
// shared channel of a single host's workers (see package propagate).
//
// Start runs one member: the supervisor of a multi-worker service starts
// it and hands its Endpoints to every worker. StartCluster runs several
// members on loopback with an initial cluster string; it exists so that
// tests and benchmarks can exercise a real multi-member cluster (leader
// election, a member that stops and comes back) on one machine.
//
// # Durability
//
// The published configuration is ephemeral by contract: the configuration
// file stays the boot authority, and a fresh channel is seeded by the first
// worker's startup load. So by default a member does not fsync its
// write-ahead log (etcd's UnsafeNoFsync): a power loss may lose the last
// writes or the whole data directory, which costs nothing but a re-seed,
// and a compare-and-set round trip stays in the low milliseconds. Set
// Config.Fsync to keep etcd's durable default.
//
// # Logs
//
// etcd's own logs go to Config.Logger (default slog.Default()) at error
// level and above unless Config.LogLevel says otherwise.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/reconfhq/reconf/propagate/internal/zlog"
)

// Config configures a member. The zero value is a quiet, non-durable
// member named "reconf" in a temporary directory.
type Config struct {
	// Dir is the data directory. Empty means a new temporary directory,
	// removed when the member closes.
	Dir string
	// Name is the member name (default "reconf"; StartCluster appends the
	// member index).
	Name string
	// Logger receives etcd's logs (default slog.Default()).
	Logger *slog.Logger
	// LogLevel is the lowest level of etcd's logs that reaches Logger
	// (default slog.LevelError).
	LogLevel slog.Leveler
	// Fsync keeps etcd's durable write-ahead log. The default trades it for
	// latency; see the package documentation.
	Fsync bool
	// TickMs and ElectionMs are etcd's heartbeat interval and election
	// timeout in milliseconds (defaults 100 and 1000).
	TickMs, ElectionMs uint
	// StartTimeout bounds waiting for the member (or, for a cluster, the
	// quorum) to be ready (default 30s).
	StartTimeout time.Duration
}

// ErrStopped is returned when a member is used after it stopped.
var ErrStopped = errors.New("embedded: member stopped")

// Server is one running etcd member listening on loopback only. Its
// methods are safe for concurrent use.
type Server struct {
	cfg       Config
	name      string
	dir       string
	tmp       bool
	clientURL url.URL
	peerURL   url.URL
	initial   string // initial cluster string
	state     string // initial cluster state

	stopping atomic.Bool // a stop is in progress

	mu sync.Mutex
	e  *embed.Etcd // nil when stopped
}

// Start runs a single-member etcd on two free loopback ports and returns
// once it serves clients. Close stops it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	var last error
	for range 3 { // a free port may be taken between probing and binding
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		s, err := newServer(cfg, cfg.Name, loopbackURL(ports[0]), loopbackURL(ports[1]))
		if err != nil {
			return nil, err
		}
		s.initial = s.name + "=" + s.peerURL.String()
		if err = s.start(); err == nil {
			if err = s.wait(ctx); err == nil {
				return s, nil
			}
		}
		s.Close()
		last = err
		if !isAddrInUse(err) {
			break
		}
	}
	return nil, last
}

func newServer(cfg Config, name string, client, peer url.URL) (*Server, error) {
	if name == "" {
		name = "reconf"
	}
	s := &Server{cfg: cfg, name: name, dir: cfg.Dir, clientURL: client, peerURL: peer, state: embed.ClusterStateFlagNew}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "reconf-etcd-")
		if err != nil {
			return nil, fmt.Errorf("embedded: data directory: %w", err)
		}
		s.dir, s.tmp = d, true
	}
	return s, nil
}

// configLocked returns the member's etcd configuration. s.mu must be held.
func (s *Server) configLocked() *embed.Config {
	c := embed.NewConfig()
	c.Name = s.name
	c.Dir = s.dir
	c.ListenClientUrls = []url.URL{s.clientURL}
	c.AdvertiseClientUrls = []url.URL{s.clientURL}
	c.ListenPeerUrls = []url.URL{s.peerURL}
	c.AdvertisePeerUrls = []url.URL{s.peerURL}
	c.InitialCluster = s.initial
	c.InitialClusterToken = "reconf"
	c.ClusterState = s.state
	c.UnsafeNoFsync = !s.cfg.Fsync
	c.EnableGRPCGateway = false
	// A record carries every live field; allow large configurations
	// (propagate.Connect's client sends up to 8 MiB).
	c.MaxRequestBytes = 8 << 20
	c.Metrics = "basic"
	// Presence heartbeats write a little every second; keep history short.
	c.AutoCompactionMode = embed.CompactorModePeriodic
	c.AutoCompactionRetention = "5m"
	if s.cfg.TickMs > 0 {
		c.TickMs = s.cfg.TickMs
	}
	if s.cfg.ElectionMs > 0 {
		c.ElectionMs = s.cfg.ElectionMs
	}
	lvl := slog.Level(slog.LevelError)
	if s.cfg.LogLevel != nil {
		lvl = s.cfg.LogLevel.Level()
	}
	lg := s.cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	c.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zlog.NewDemoting(lg, "etcd", lvl, s.shutdownNoise).Named(s.name))
	return c
}

// shutdownNoise tells the errors etcd logs about its own listeners while
// it stops on purpose, which are not errors for the service.
func (s *Server) shutdownNoise(msg string) bool {
	return s.stopping.Load() && msg == "setting up serving from embedded etcd failed."
}

// start launches the member without waiting for it to be ready.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return nil
	}
	e, err := embed.StartEtcd(s.configLocked())
	if err != nil {
		return fmt.Errorf("embedded: start member %s: %w", s.name, err)
	}
	s.e = e
	return nil
}

// wait blocks until the member serves, fails or ctx ends.
func (s *Server) wait(ctx context.Context) error {
	s.mu.Lock()
	e := s.e
	s.mu.Unlock()
	if e == nil {
		return ErrStopped
	}
	d := s.cfg.StartTimeout
	if d <= 0 {
		d = 30 * time.Second
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("embedded: member %s failed to start: %w", s.name, err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("embedded: member %s stopped while starting", s.name)
	case <-t.C:
		return fmt.Errorf("embedded: member %s not ready within %v", s.name, d)
	case <-ctx.Done():
		return fmt.Errorf("embedded: member %s: %w", s.name, ctx.Err())
	}
}

// Endpoints returns the member's client URL (http://127.0.0.1:port).
func (s *Server) Endpoints() []string { return []string{s.clientURL.String()} }

// Name returns the member name.
func (s *Server) Name() string { return s.name }

// Running reports whether the member is started.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e != nil
}

// IsLeader reports whether the member is running and is its cluster's
// leader.
func (s *Server) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e != nil && s.e.Server.Leader() == s.e.Server.MemberID()
}

// stop stops the member and keeps its data directory. With hard, the
// member does not hand its leadership over first, as if it crashed.
func (s *Server) stop(hard bool) {
	s.mu.Lock()
	e := s.e
	s.e = nil
	s.mu.Unlock()
	if e == nil {
		return
	}
	s.stopping.Store(true)
	defer s.stopping.Store(false)
	if hard {
		e.Server.HardStop()
	}
	e.Close()
}

// Close stops the member and removes its data directory if Start created
// it. It is idempotent.
func (s *Server) Close() error {
	s.stop(false)
	if s.tmp {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// Cluster is several members on loopback forming one etcd cluster, for
// tests and benchmarks. Its methods are safe for concurrent use.
type Cluster struct {
	members []*Server
}

// StartCluster runs n members with one initial cluster string and returns
// once every member serves. Each member gets its own temporary directory
// (or cfg.Dir/<name> when cfg.Dir is set).
func StartCluster(ctx context.Context, n int, cfg Config) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("embedded: cluster size %d", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	base := cfg.Name
	if base == "" {
		base = "reconf"
	}
	c := &Cluster{}
	var initial []string
	for i := range n {
		mc := cfg
		name := fmt.Sprintf("%s-%d", base, i)
		if cfg.Dir != "" {
			mc.Dir = cfg.Dir + string(os.PathSeparator) + name
		}
		s, err := newServer(mc, name, loopbackURL(ports[2*i]), loopbackURL(ports[2*i+1]))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.members = append(c.members, s)
		initial = append(initial, name+"="+s.peerURL.String())
	}
	for _, s := range c.members {
		s.initial = strings.Join(initial, ",")
		if err := s.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, s := range c.members {
		if err := s.wait(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Members returns the members in index order.
func (c *Cluster) Members() []*Server { return c.members }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, s := range c.members {
		out = append(out, s.Endpoints()...)
	}
	return out
}

// Leader returns the index of the running member that leads, or -1.
func (c *Cluster) Leader() int {
	for i, s := range c.members {
		if s.IsLeader() {
			return i
		}
	}
	return -1
}

// Stop stops member i, keeping its data, without handing its leadership
// over first (as a crash would).
func (c *Cluster) Stop(i int) { c.members[i].stop(true) }

// Restart starts member i again from its data directory and waits until it
// serves.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	s := c.members[i]
	s.mu.Lock()
	s.state = embed.ClusterStateFlagExisting
	s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	return s.wait(ctx)
}

// Close stops every member and removes the directories Start created.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i, s := range c.members {
		wg.Go(func() { errs[i] = s.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func loopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedded: find a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
