package supervisor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reservation is a TCP address held with SO_REUSEPORT by a socket that is
// bound but never listens: no connection is ever queued on it, other
// processes of the same user may listen on the address with SO_REUSEPORT
// (ListenReusePort), and nobody else can take the port while it is held.
type Reservation struct {
	fd   int
	addr netip.AddrPort
}

// Reserve binds addr (host:port; port 0 picks a free port) with SO_REUSEPORT
// without listening. An empty host means every interface (dual-stack, like
// net.Listen). A host name is resolved and its first address used.
func Reserve(addr string) (*Reservation, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("supervisor: reserve %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("supervisor: reserve %q: bad port", addr)
	}
	var ip netip.Addr
	switch {
	case host == "":
		ip = netip.IPv6Unspecified()
	default:
		ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("supervisor: reserve %q: cannot resolve the host", addr)
		}
		ip = ips[0].Unmap()
	}
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil && host == "" {
		// No IPv6 here: every interface means every IPv4 one, as for
		// net.Listen.
		family, ip = unix.AF_INET, netip.IPv4Unspecified()
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("supervisor: reserve %q: %w", addr, err)
	}
	r := &Reservation{fd: fd}
	if err := r.bind(family, ip, int(port)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("supervisor: reserve %s: %w", net.JoinHostPort(host, portStr), err)
	}
	return r, nil
}

func (r *Reservation) bind(family int, ip netip.Addr, port int) error {
	if err := unix.SetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return err
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: port, Addr: ip.As4()}
	} else {
		if ip.IsUnspecified() {
			// Dual-stack, as Go's listeners on ":port" are.
			if err := unix.SetsockoptInt(r.fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
				return err
			}
		}
		sa = &unix.SockaddrInet6{Port: port, Addr: ip.As16()}
	}
	if err := unix.Bind(r.fd, sa); err != nil {
		return err
	}
	got, err := unix.Getsockname(r.fd)
	if err != nil {
		return err
	}
	switch s := got.(type) {
	case *unix.SockaddrInet4:
		r.addr = netip.AddrPortFrom(netip.AddrFrom4(s.Addr), uint16(s.Port))
	case *unix.SockaddrInet6:
		r.addr = netip.AddrPortFrom(netip.AddrFrom16(s.Addr), uint16(s.Port))
	}
	return nil
}

// Addr returns the reserved address with its concrete port, as host:port
// ("[::]:port" for every interface).
func (r *Reservation) Addr() string { return r.addr.String() }

// Port returns the reserved port.
func (r *Reservation) Port() int { return int(r.addr.Port()) }

// Close releases the port.
func (r *Reservation) Close() error { return unix.Close(r.fd) }

// ListenReusePort listens on addr with SO_REUSEPORT, so that every worker
// (and a Reservation) can hold the same address; the kernel spreads
// incoming connections across the listeners.
func ListenReusePort(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: reusePort}
	return lc.Listen(ctx, "tcp", addr)
}

func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
