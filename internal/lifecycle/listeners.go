package lifecycle

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// Names of the sockets a supervisor (or a restarting process) hands on.
const (
	// ListenerData is the data plane's socket.
	ListenerData = "data"
	// ListenerManagement is management's socket.
	ListenerManagement = "management"
)

// DrainIdleGrace bounds how long a drain waits for connections that stay
// idle: a client under load sends its next request within milliseconds,
// is answered with Connection: close and moves to a new connection; one
// idle for this long is closed by Shutdown.
const DrainIdleGrace = time.Second

// Listen opens what (server.address, the management address) with a plain
// bind. An address in use is an error naming the process that holds it,
// where /proc tells, so that a second fleet on a running fleet's address
// fails at start with a clear reason.
func Listen(what, addr string) (net.Listener, error) {
	ln, err := handoff.Listen(addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		if h, ok := HolderOf(addr); ok {
			return nil, fmt.Errorf("listen on %s %s: the address is in use by %s; stop it, or use another address", what, addr, h)
		}
		return nil, fmt.Errorf("listen on %s %s: the address is in use by another process", what, addr)
	}
	return nil, fmt.Errorf("listen on %s %s: %w", what, addr, err)
}
