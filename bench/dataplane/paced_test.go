//go:build linux

package main

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, except fasthttp's own background
// ones: the process-wide Date refresher and address-cache cleaner, a
// client's idle-connection cleaner and a server's idle-worker cleaner,
// each of which ends by itself.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// paced sends exactly one request per slot of its schedule, late or not,
// times the ones answered 200 and counts the others.
func TestPacedSendsItsSchedule(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served, refused atomic.Int64
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		// Every tenth request fails, so that failures are counted, not
		// timed.
		if served.Add(1)%10 == 0 {
			refused.Add(1)
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			return
		}
		ctx.SetBodyString(`{}`)
	}}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	defer func() { _ = srv.Shutdown(); <-done }()

	// 2,000 a second over 4 connections: a slot every 2 ms on each, 150
	// slots each in 300 ms.
	tg := &target{name: "test", addr: ln.Addr().String(), path: "/v1/chat/completions", model: "m"}
	lats, _, failed := paced(tg, 2000, 4, 300*time.Millisecond)
	if got := int64(len(lats) + failed); got != 600 || served.Load() != 600 {
		t.Fatalf("%d timed + %d failed, server saw %d; want 600 sends", len(lats), failed, served.Load())
	}
	if int64(failed) != refused.Load() {
		t.Fatalf("%d counted failed, the server refused %d", failed, refused.Load())
	}
	for i := 1; i < len(lats); i++ {
		if lats[i] < lats[i-1] || lats[0] <= 0 {
			t.Fatal("the latencies are not sorted and positive")
		}
	}
}
