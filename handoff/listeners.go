package handoff

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// EnvListeners names the inherited listening sockets in a child's
// environment: "name=fd" pairs separated by commas, for example
// "data=4,management=5".
const EnvListeners = "RECONF_LISTENERS"

// Listen binds and listens on a TCP address (host:port; port 0 picks a
// free port) with a plain bind: no SO_REUSEPORT, so the address belongs to
// one socket and a second service that tries it gets EADDRINUSE. The
// socket is meant to be held by one process tree for its whole life and
// handed on with a Set.
func Listen(addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}

// Set is a named collection of listening sockets to hand to child
// processes. Its methods are safe for concurrent use. The Set holds its
// own duplicate of each socket, so closing the listener passed to Add does
// not close the socket while the Set (or a child) holds it.
type Set struct {
	mu    sync.Mutex
	names []string
	files map[string]*os.File
	addrs map[string]net.Addr
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{files: map[string]*os.File{}, addrs: map[string]net.Addr{}}
}

// rawConner is a listener whose descriptor can be reached
// (*net.TCPListener, *net.UnixListener).
type rawConner interface {
	SyscallConn() (syscall.RawConn, error)
}

// Add duplicates ln's socket into the Set under name, replacing a socket
// of the same name. The caller still owns ln. Names are non-empty and hold
// no '=' or ','.
func (s *Set) Add(name string, ln net.Listener) error {
	if name == "" || strings.ContainsAny(name, "=,") {
		return fmt.Errorf("handoff: bad listener name %q", name)
	}
	f, err := dup(name, ln)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.files[name]; old != nil {
		old.Close()
	} else {
		s.names = append(s.names, name)
	}
	s.files[name] = f
	s.addrs[name] = ln.Addr()
	return nil
}

// Names returns the names in the order they were added.
func (s *Set) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.names)
}

// Addr returns the address of the socket named name, or nil.
func (s *Set) Addr(name string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[name]
}

// Pass hands the Set's sockets to cmd, which must not have started: each
// socket is appended to cmd.ExtraFiles and EnvListeners in cmd.Env names
// its descriptor number (cmd.Env nil means this process's environment).
// Sockets already in ExtraFiles keep their numbers.
func (s *Set) Pass(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pairs := make([]string, 0, len(s.names))
	for _, n := range s.names {
		fd := 3 + len(cmd.ExtraFiles)
		cmd.ExtraFiles = append(cmd.ExtraFiles, s.files[n])
		pairs = append(pairs, n+"="+strconv.Itoa(fd))
	}
	setEnv(cmd, EnvListeners, strings.Join(pairs, ","))
}

// Close releases the Set's duplicates. Children that inherited the
// sockets keep them.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		f.Close()
	}
	clear(s.files)
	s.names = nil
	return nil
}

// setEnv sets name=value in cmd.Env, replacing an earlier entry.
func setEnv(cmd *exec.Cmd, name, value string) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, name+"=") })
	cmd.Env = append(cmd.Env, name+"="+value)
}

// Inherited returns the listening sockets this process inherited, by name
// (an empty map when EnvListeners is not set), and unsets EnvListeners so
// that the process's own children do not claim the same descriptors. Each
// descriptor must be a listening stream socket, or Inherited returns an
// error wrapping ErrBadEnv and closes what it opened. Call it once, early.
func Inherited() (map[string]net.Listener, error) {
	v, ok := os.LookupEnv(EnvListeners)
	if !ok {
		return map[string]net.Listener{}, nil
	}
	os.Unsetenv(EnvListeners)
	out := map[string]net.Listener{}
	fail := func(format string, args ...any) (map[string]net.Listener, error) {
		for _, ln := range out {
			ln.Close()
		}
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrBadEnv}, args...)...)
	}
	if v == "" {
		return out, nil
	}
	for _, pair := range strings.Split(v, ",") {
		name, num, ok := strings.Cut(pair, "=")
		fd, err := strconv.Atoi(num)
		if !ok || name == "" || err != nil || fd < 3 {
			return fail("%q", pair)
		}
		if _, dup := out[name]; dup {
			return fail("%q is named twice", name)
		}
		if err := checkListening(fd); err != nil {
			return fail("descriptor %d (%s): %v", fd, name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err != nil {
			return fail("descriptor %d (%s): %v", fd, name, err)
		}
		out[name] = ln
	}
	return out, nil
}
