package handoff

import "errors"

// Errors of the package. Callers branch with errors.Is.
var (
	// ErrNotReady is returned by Process.WaitReady when the child ended its
	// readiness pipe (exited, or closed it) without saying ready.
	ErrNotReady = errors.New("handoff: the process did not become ready")
	// ErrBadEnv is returned by Inherited when EnvListeners is malformed or
	// names a descriptor that is not a listening socket.
	ErrBadEnv = errors.New("handoff: malformed inherited listeners")
	// ErrUnsupported is returned on a system without inheritable file
	// descriptors (Windows): sockets cannot be handed to another process
	// there, so restarts without loss and worker fleets need Linux or
	// another Unix.
	ErrUnsupported = errors.New("handoff: handing sockets to another process needs a Unix system (Linux, macOS, BSD)")
)
