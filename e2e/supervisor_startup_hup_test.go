//go:build unix

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hupAtStartScript is a shell script in front of reconfd (fault
// injection) that starts it with SIGHUP ignored and sends it SIGHUP as
// soon as it catches the signal (the SigCgt mask of /proc/PID/status),
// that is, in its first milliseconds, long before a supervisor catches
// signals itself. %s is the binary.
const hupAtStartScript = `#!/bin/sh
trap '' HUP
(
  while [ -e /proc/$$/status ]; do
    m=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$$/status)
    if [ -n "$m" ] && [ $(( 0x${m#${m%%?}} & 1 )) -ne 0 ]; then
      kill -HUP $$
      exit 0
    fi
    sleep 0.001
  done
) &
exec %s "$@"
`

// TestSupervisorReloadsForASIGHUPOfItsStartup: a SIGHUP that reaches a
// fleet's supervisor during its start-up, before it catches signals
// itself, becomes one reload once the fleet serves (it goes to a worker),
// as for a single process; it was dropped. Cost: 3-6 s on a loaded
// 2-core machine.
func TestSupervisorReloadsForASIGHUPOfItsStartup(t *testing.T) {
	requireBinary(t)
	exe := filepath.Join(t.TempDir(), "reconfd-hup")
	if err := os.WriteFile(exe, []byte(fmt.Sprintf(hupAtStartScript, binary)), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(config(2, "0s"), "server:\n", "server:\n  workers: 2\n", 1)
	r := startRestartable(t, exe, cfg)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(r.logs.String(), `msg="SIGHUP forwarded"`); {
		if time.Now().After(deadline) {
			t.Fatalf("the SIGHUP of the supervisor's start-up was not forwarded to a worker:\n%s", r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(r.logs.String(), "a SIGHUP arrived during start-up; reloading for it now") {
		t.Errorf("the supervisor did not say it reloads for the SIGHUP of its start-up:\n%s", r.logs.String())
	}
}
