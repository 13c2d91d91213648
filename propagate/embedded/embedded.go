// Package embedded runs etcd inside the process as the shared channel of
// a single host's workers (see package propagate).
//
// Start runs one member that is private to the user the process runs as:
// the supervisor of a multi-worker service starts it and hands its
// Endpoints to every worker. StartCluster runs several members on
// loopback TCP with an initial cluster string; it exists so that tests
// and benchmarks can exercise a real multi-member cluster (leader
// election, a member that stops and comes back, TLS with client
// certificates) on one machine.
//
// # Privacy
//
// A member from Start listens on one unix socket, etcd.sock, in a
// directory that Start creates with mode 0700 under Config.RuntimeDir
// (default os.TempDir()) and removes on Close. It opens no TCP port at
// all: no client port and, being a single member, no peer port (a peer
// port would accept raft messages, and so writes, from anyone on the
// host). Another local user cannot reach the socket, since the kernel
// refuses to resolve a path through a directory they may not search;
// the user the service runs as, and root, can. The directory is new for
// each member, because etcd removes whatever file is at its socket path
// before it listens: a fixed path would let a second fleet take the
// first one's socket away.
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
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"

	"github.com/reconfhq/reconf/internal/ownerdir"
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
	// RuntimeDir is where Start creates its private directory (default
	// os.TempDir()). The socket's path must fit a unix socket address
	// (at most 107 bytes), so a short directory is best. StartCluster
	// ignores it.
	RuntimeDir string
	// TLS, when set, makes StartCluster's members serve clients over
	// HTTPS and require a client certificate signed by TLS.TrustedCAFile.
	// Start ignores it (its socket is private already).
	TLS *TLSFiles
	// SocketDir, for Start, is an existing private directory to listen
	// in instead of a new one: the one a member of a previous process
	// left with Stop, so that a successor's member listens on the same
	// socket path and clients of the previous member reconnect to it. It
	// must be a directory owned by this user with mode 0700, or Start
	// refuses it.
	SocketDir string
	// BcryptCost is the cost of hashing the passwords of the etcd users the
	// member holds (default bcrypt's, 10). Each login hashes once, about a
	// second under the race detector at the default: tests that log in as
	// several users lower it.
	BcryptCost uint
}

// TLSFiles names the PEM files of a member's client TLS.
type TLSFiles struct {
	// CertFile and KeyFile are the member's server certificate and key.
	CertFile, KeyFile string
	// TrustedCAFile verifies client certificates, which are then required.
	TrustedCAFile string
}

// ProgressNotifyInterval is how often a member sends a progress
// notification on each watch that asks for them and had no event since
// the last (etcd's --watch-progress-notify-interval). A propagate
// follower does not ask for them: at rest it proves its watch by its
// lease renewals' answers (propagate.WithLeaseAnswers), and otherwise
// asks for progress when a proof is due, as it does on an external
// cluster.
const ProgressNotifyInterval = 5 * time.Second

// ErrStopped is returned when a member is used after it stopped.
var ErrStopped = errors.New("embedded: member stopped")

// Server is one running etcd member listening on loopback only. Its
// methods are safe for concurrent use.
type Server struct {
	cfg       Config
	name      string
	dir       string
	tmp       bool
	private   string    // the private directory holding the socket; "" for a TCP member
	owner     io.Closer // this process's lock on private's owners file; nil for a TCP member
	clientURL url.URL
	peerURL   url.URL
	initial   string // initial cluster string
	state     string // initial cluster state

	stopping atomic.Bool // a stop is in progress

	mu sync.Mutex
	e  *embed.Etcd // nil when stopped
}

// Start runs a single-member etcd that listens only on a unix socket in a
// new private directory (see Privacy in the package documentation) and
// returns once it serves clients. Close stops it and removes the
// directory.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if runtime.GOOS == "windows" {
		return nil, errors.New("embedded: the member's socket is a unix socket in a directory of mode 0700, a privacy Windows does not give; run the fleet on Linux or another Unix, or join an external cluster")
	}
	priv, err := cfg.SocketDir, error(nil)
	if priv == "" {
		priv, err = privateDir(cfg.RuntimeDir)
	} else {
		err = checkPrivate(priv)
	}
	var owner io.Closer
	if err == nil {
		owner, err = addOwner(priv)
	}
	if err != nil {
		if cfg.SocketDir == "" && priv != "" {
			os.RemoveAll(priv)
		}
		return nil, err
	}
	if cfg.SocketDir == "" {
		sweepLeftovers(filepath.Dir(priv), priv, cfg.logger())
	}
	sock := filepath.Join(priv, "etcd.sock")
	if len(sock) > maxSocketPath {
		os.RemoveAll(priv)
		owner.Close()
		return nil, fmt.Errorf("embedded: the socket path %s is %d bytes, longer than a unix socket address allows (%d); use a shorter runtime directory (TMPDIR)", sock, len(sock), maxSocketPath)
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(priv, "data")
	}
	// A single member never dials its own peer URL, and no peer listener
	// is opened; the URL only names the member in its cluster.
	s, err := newServer(cfg, cfg.Name, url.URL{Scheme: "unix", Path: sock}, url.URL{Scheme: "http", Host: "127.0.0.1:1"})
	if err != nil {
		os.RemoveAll(priv)
		owner.Close()
		return nil, err
	}
	s.private, s.owner = priv, owner
	s.initial = s.name + "=" + s.peerURL.String()
	if err = s.start(); err == nil {
		if err = s.wait(ctx); err == nil {
			return s, nil
		}
	}
	s.Close()
	return nil, err
}

// maxSocketPath is the longest path a unix socket address holds on Linux
// (108 bytes with the terminating NUL).
const maxSocketPath = 107

// logger is Logger, or slog.Default().
func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// privatePrefix begins the name of every private directory Start makes.
const privatePrefix = "reconf-etcd-"

// privateDir creates a new directory only the current user may enter and
// checks that it is one: a directory, owned by this user, mode 0700.
func privateDir(parent string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	dir, err := os.MkdirTemp(parent, privatePrefix)
	if err != nil {
		return "", fmt.Errorf("embedded: private directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("embedded: private directory: %w", err)
	}
	if err := checkPrivate(dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// checkPrivate checks that dir is a directory (not a symbolic link)
// owned by this user with mode 0700.
func checkPrivate(dir string) error {
	if err := ownerdir.Private(dir); err != nil {
		return fmt.Errorf("embedded: private directory: %w", err)
	}
	return nil
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
	if s.cfg.BcryptCost != 0 {
		c.BcryptCost = s.cfg.BcryptCost
	}
	c.Dir = s.dir
	c.ListenClientUrls = []url.URL{s.clientURL}
	c.AdvertiseClientUrls = []url.URL{s.clientURL}
	c.ListenPeerUrls = []url.URL{s.peerURL}
	if s.private != "" {
		c.ListenPeerUrls = nil // a single member: no peer port for anyone to reach
	}
	c.AdvertisePeerUrls = []url.URL{s.peerURL}
	if t := s.cfg.TLS; t != nil && s.private == "" {
		c.ClientTLSInfo.CertFile, c.ClientTLSInfo.KeyFile = t.CertFile, t.KeyFile
		c.ClientTLSInfo.TrustedCAFile, c.ClientTLSInfo.ClientCertAuth = t.TrustedCAFile, true
	}
	c.InitialCluster = s.initial
	c.InitialClusterToken = "reconf"
	c.ClusterState = s.state
	c.UnsafeNoFsync = !s.cfg.Fsync
	c.EnableGRPCGateway = false
	// A record carries every live field; allow large configurations
	// (propagate.Connect's client sends up to 8 MiB).
	c.MaxRequestBytes = 8 << 20
	c.Metrics = "basic"
	// Followers prove their watches live by their lease renewals' answers
	// at rest, and by the member's progress notifications after other
	// keys changed (propagate's resync). The setting is process-wide in
	// etcd's server package.
	c.WatchProgressNotifyInterval = ProgressNotifyInterval
	// Fixed flow-control windows, as propagate.Connect's: gRPC's bandwidth
	// estimator answers nearly every small message on an idle connection
	// (a notification, a renewal) with a ping and its acknowledgement.
	c.GRPCAdditionalServerOptions = []grpc.ServerOption{
		grpc.StaticStreamWindowSize(4 << 20),
		grpc.StaticConnWindowSize(8 << 20),
	}
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
	lg := s.cfg.logger()
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

// Endpoints returns the member's client URL: unix:///dir/etcd.sock for a
// member from Start, http(s)://127.0.0.1:port for one of StartCluster.
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

// SocketDir returns the private directory holding a Start member's
// socket ("" for a member of StartCluster).
func (s *Server) SocketDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.private
}

// DataDir returns the member's data directory.
func (s *Server) DataDir() string { return s.dir }

// Stop stops the member and keeps its data directory and its private
// directory: a successor process can start a member from them (Config.Dir
// and Config.SocketDir), and Resume starts this one again. Clients keep
// their endpoint and reconnect once a member serves again. It is
// idempotent.
func (s *Server) Stop() { s.stop(false) }

// Resume starts a stopped member again from its data directory and waits
// until it serves (see Stop).
func (s *Server) Resume(ctx context.Context) error {
	if err := s.start(); err != nil {
		return err
	}
	return s.wait(ctx)
}

// Release stops the member and hands its directories over: Close then
// removes nothing, since a successor's member owns them now.
func (s *Server) Release() {
	s.stop(false)
	s.mu.Lock()
	s.tmp, s.private = false, ""
	owner := s.owner
	s.owner = nil
	s.mu.Unlock()
	if owner != nil {
		owner.Close()
	}
}

// Close stops the member and removes its data directory if Start created
// it, and its private directory. It is idempotent.
func (s *Server) Close() error {
	s.stop(false)
	s.mu.Lock()
	tmp, private, owner := s.tmp, s.private, s.owner
	s.owner = nil
	s.mu.Unlock()
	var errs []error
	if tmp {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	if private != "" {
		errs = append(errs, os.RemoveAll(private))
	}
	if owner != nil {
		owner.Close() // after the removal: no sweep takes it for a leftover meanwhile
	}
	return errors.Join(errs...)
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
		client := loopbackURL(ports[2*i])
		if cfg.TLS != nil {
			client.Scheme = "https"
		}
		s, err := newServer(mc, name, client, loopbackURL(ports[2*i+1]))
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
