package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkKeyFleetIdle is the CPU a worker's key fleet costs while no
// key is used: 100 limited keys, one worker, no requests. The etcd server
// runs in the same process, so "etcd-alone" is the floor to compare with.
// Reported as CPU milliseconds per second of wall time.
func BenchmarkKeyFleetIdle(b *testing.B) {
	cli, lease := leasedClient(b)
	limits := make(map[string]KeyLimits, 100)
	for i := range 100 {
		limits[fmt.Sprintf("key-%03d", i)] = KeyLimits{Requests: 600, Tokens: 100000, Per: time.Minute}
	}
	const span = 2 * time.Second
	measure := func(b *testing.B) {
		var cpu, wall time.Duration
		for b.Loop() {
			before, start := cpuTime(), time.Now()
			time.Sleep(span)
			cpu += cpuTime() - before
			wall += time.Since(start)
		}
		b.ReportMetric(float64(cpu.Microseconds())/1e3/wall.Seconds(), "cpu-ms/s")
	}
	b.Run("etcd-alone", measure)
	b.Run("keyfleet-100-keys", func(b *testing.B) {
		f := startKeyFleet(cli, "/bench/"+b.Name(), "w1", func() clientv3.LeaseID { return lease }, &keyLimiters{},
			func() map[string]KeyLimits { return limits }, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer f.Close(context.Background())
		time.Sleep(200 * time.Millisecond) // its first report
		measure(b)
	})
}
