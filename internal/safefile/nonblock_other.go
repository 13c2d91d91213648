//go:build !unix

package safefile

// openNonblock is zero where there is no non-blocking open flag; the stat
// before the open refuses a pipe there.
const openNonblock = 0
