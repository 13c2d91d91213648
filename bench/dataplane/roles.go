//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The harness starts its upstream and its bare proxies as child processes
// of its own executable, each named by roleEnv, so that every server in the
// comparison is a separate process as nginx and reconfd are.
const roleEnv = "DATAPLANE_ROLE"

// runRole runs the child role named in the environment, if any, and
// reports whether it did.
func runRole() bool {
	role := os.Getenv(roleEnv)
	if role == "" {
		return false
	}
	var err error
	switch role {
	case "upstream":
		err = serveUpstream(os.Getenv("DATAPLANE_LISTEN"))
	case "proxy-nethttp":
		err = serveNetHTTPProxy(os.Getenv("DATAPLANE_LISTEN"), os.Getenv("DATAPLANE_UPSTREAM"))
	case "proxy-fasthttp":
		err = serveFastHTTPProxy(os.Getenv("DATAPLANE_LISTEN"), os.Getenv("DATAPLANE_UPSTREAM"))
	case "gateway-profile":
		err = serveProfiledGateway(os.Getenv("DATAPLANE_CONFIG"), os.Getenv("DATAPLANE_PROFILE"))
	case "proxy-hybrid":
		err = serveHybridProxy(os.Getenv("DATAPLANE_LISTEN"), os.Getenv("DATAPLANE_UPSTREAM"))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		os.Exit(1)
	}
	return true
}

// completion is the upstream's whole answer to a chat completion: the size
// and shape of a short real one.
var completion = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1764633600,"model":"bench-1",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"A short answer from the benchmark upstream, about twenty tokens long, as a small real completion would be."},"finish_reason":"stop","logprobs":null}],` +
	`"usage":{"prompt_tokens":12,"completion_tokens":21,"total_tokens":33}}`)

// streamChunks is how many content chunks a streamed answer has; the
// upstream sends them streamGap apart, after the first at once.
const (
	streamChunks = 16
	streamGap    = 2 * time.Millisecond
)

func chunk(i int) []byte {
	return []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764633600,"model":"bench-1","choices":[{"index":0,"delta":{"content":" token` +
		strconv.Itoa(i) + `"},"finish_reason":null,"logprobs":null}]}` + "\n\n")
}

// serveUpstream is a fast OpenAI-compatible upstream: it answers every
// chat completion at once with a fixed body, or, for a request with
// "stream":true, with streamChunks server-sent events.
func serveUpstream(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	streamKey := []byte(`"stream":true`)
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if !ctx.IsPost() {
				ctx.Error("method", fasthttp.StatusMethodNotAllowed)
				return
			}
			if !bytes.Contains(ctx.PostBody(), streamKey) {
				ctx.SetContentType("application/json")
				ctx.SetBody(completion)
				return
			}
			ctx.SetContentType("text/event-stream")
			ctx.Response.Header.Set("Cache-Control", "no-cache")
			ctx.Response.Header.Set("X-Accel-Buffering", "no")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for i := range streamChunks {
					if i > 0 {
						time.Sleep(streamGap)
					}
					if _, err := w.Write(chunk(i)); err != nil {
						return
					}
					if err := w.Flush(); err != nil {
						return
					}
				}
				_, _ = w.WriteString("data: [DONE]\n\n")
				_ = w.Flush()
			})
		},
		NoDefaultServerHeader: true,
	}
	return serveUntilSignal(ln, srv.Serve)
}

// serveNetHTTPProxy is a bare net/http reverse proxy (httputil.ReverseProxy)
// with upstream keep-alive: the best a net/http data plane does with
// nothing of its own in the path.
func serveNetHTTPProxy(addr, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	rp.FlushInterval = -1
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	return serveUntilSignal(ln, srv.Serve)
}

// serveFastHTTPProxy is a bare fasthttp proxy over a HostClient with
// upstream keep-alive.
func serveFastHTTPProxy(addr, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 256, ReadTimeout: 30 * time.Second}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			req := &ctx.Request
			req.SetHost(u.Host)
			if err := hc.Do(req, &ctx.Response); err != nil {
				ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
			}
		},
		NoDefaultServerHeader: true,
	}
	return serveUntilSignal(ln, srv.Serve)
}

// serveHybridProxy is a fasthttp server whose upstream calls go through a
// net/http Transport: what the server side alone buys.
func serveHybridProxy(addr, upstream string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			req, err := http.NewRequest(http.MethodPost, upstream+string(ctx.Path()), bytes.NewReader(ctx.PostBody()))
			if err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			ctx.SetStatusCode(resp.StatusCode)
			ctx.SetContentType(resp.Header.Get("Content-Type"))
			buf := ctx.Response.BodyWriter()
			_, _ = io.Copy(buf, resp.Body)
		},
		NoDefaultServerHeader: true,
	}
	return serveUntilSignal(ln, srv.Serve)
}

// listen listens on addr, with SO_REUSEPORT when DATAPLANE_REUSEPORT is
// set (several processes on one address).
func listen(addr string) (net.Listener, error) {
	if os.Getenv("DATAPLANE_REUSEPORT") == "" {
		return net.Listen("tcp", addr)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

// serveUntilSignal serves ln until SIGTERM or SIGINT.
func serveUntilSignal(ln net.Listener, serve func(net.Listener) error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve(ln) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		ln.Close()
		return nil
	case err := <-errc:
		return err
	}
}
