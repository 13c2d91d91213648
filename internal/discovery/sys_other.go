//go:build !unix

package discovery

// openNoFollow adds nothing where the open has no such flags (Windows);
// the file is checked to be regular after the open.
const openNoFollow = 0

// processGone reports false: without a cheap liveness probe, a stale
// discovery file is skipped by the client that cannot reach its address
// rather than removed.
func processGone(int) bool { return false }
