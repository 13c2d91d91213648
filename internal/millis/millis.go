// Package millis renders a duration the way the project's JSON and logs
// carry it: as fractional milliseconds, to the microsecond
// ("duration_ms": 12.345). It imports nothing of the project.
package millis

import "time"

// Of returns d in milliseconds, truncated to the microsecond.
func Of(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
