//go:build race

package gateway

// raceEnabled reports a build with the race detector, which allocates on
// its own: allocation counts are checked without it.
const raceEnabled = true
