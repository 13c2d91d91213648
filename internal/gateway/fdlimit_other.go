//go:build !unix

package gateway

// fdLimit returns 0: the platform has no descriptor limit to read.
func fdLimit() uint64 { return 0 }
