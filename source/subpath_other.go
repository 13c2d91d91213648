//go:build !linux

package source

// mountedOnItself reports false where mount points are not listed in
// /proc/self/mountinfo.
func mountedOnItself(string) bool { return false }
