package handoff

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// EnvNotifySocket is systemd's notification socket variable.
const EnvNotifySocket = "NOTIFY_SOCKET"

// Notify sends state to systemd's notification socket ("READY=1",
// "STOPPING=1", "MAINPID=123\nREADY=1", ...; see sd_notify(3)). It returns
// nil and does nothing when NOTIFY_SOCKET is unset, so a service calls it
// unconditionally. It never unsets the variable: a successor started later
// needs it too.
func Notify(state string) error {
	path := os.Getenv(EnvNotifySocket)
	if path == "" {
		return nil
	}
	if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "@") {
		return fmt.Errorf("handoff: %s=%q is not a unix socket path", EnvNotifySocket, path)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("handoff: notify systemd: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("handoff: notify systemd: %w", err)
	}
	return nil
}

// NotifyReady tells systemd this process is ready and is the service's
// main process (READY=1 with MAINPID), which is what a successor must say
// for a Type=notify unit to follow it (the unit needs NotifyAccess=all).
func NotifyReady() error {
	return Notify(fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()))
}
