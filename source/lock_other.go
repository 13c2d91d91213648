//go:build !unix

package source

import (
	"errors"
	"os"
)

// advisoryLocks is false: a shared baseline is not used on this platform.
const advisoryLocks = false

// lockFile reports that advisory locks are not available here.
func lockFile(*os.File) (func(), error) {
	return nil, errors.New("advisory file locks are not available on this platform")
}
