//go:build !unix

package sighold

import "os"

// hangup is empty: this platform has no SIGHUP, so nothing is caught.
var hangup []os.Signal

// raise is never called: nothing is caught to replay.
func raise() error { return nil }
