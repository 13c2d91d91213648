//go:build !unix

package trigger

import "os"

// hangup is empty: this platform has no SIGHUP.
var hangup []os.Signal
