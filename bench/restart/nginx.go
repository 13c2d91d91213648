//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// upstream answers chat completions the way reconfd's stub does (8
// tokens, 2 ms apart when streaming), for nginx to proxy to.
func upstream() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if !strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a b c d e f g h"},"finish_reason":"stop"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl, _ := w.(http.Flusher)
		for i := range 8 {
			time.Sleep(2 * time.Millisecond)
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			if fl != nil {
				fl.Flush()
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }, nil
}

const nginxConfig = `worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  upstream up { server %[2]s; keepalive 64; }
  server {
    listen 127.0.0.1:%[3]d;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`

// nginx is a running nginx master (daemonized; its pid is in its pid
// file).
type nginx struct {
	dir, url string
	cmd      *exec.Cmd
}

func startNginx(dir, up string) (*nginx, error) {
	path, err := exec.LookPath("nginx")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConfig, dir, up, port), 0o644); err != nil {
		return nil, err
	}
	n := &nginx{dir: dir, url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	// Daemonized: nginx ignores USR2 in a master whose parent is not
	// init ("the changing binary signal is ignored").
	n.cmd = exec.Command(path, "-p", dir, "-c", conf)
	n.cmd.Stderr = os.Stderr
	if err := n.cmd.Run(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", n.url[len("http://"):]); err == nil {
			c.Close()
			return n, nil
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("nginx did not listen; see %s/error.log", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *nginx) pidFrom(file string) (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// reload is nginx -s reload: SIGHUP to the master.
func (n *nginx) reload() (time.Duration, error) {
	t0 := time.Now()
	pid, err := n.pidFrom("nginx.pid")
	if err != nil {
		return 0, err
	}
	return time.Since(t0), syscall.Kill(pid, syscall.SIGHUP)
}

// upgrade is nginx's binary upgrade: USR2 to the master (a new master
// starts from the binary on disk), WINCH to the old master (its workers
// stop gracefully), QUIT to the old master.
func (n *nginx) upgrade() (time.Duration, error) {
	t0 := time.Now()
	old, err := n.pidFrom("nginx.pid")
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p, err := n.pidFrom("nginx.pid"); err == nil && p != old {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no new nginx master after USR2")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the new master's workers start
	if err := syscall.Kill(old, syscall.SIGWINCH); err != nil {
		return 0, err
	}
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(old, syscall.SIGQUIT); err != nil {
		return 0, err
	}
	for syscall.Kill(old, 0) == nil && !zombie(old) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(t0), nil
}

func (n *nginx) stop() {
	if pid, err := n.pidFrom("nginx.pid"); err == nil {
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil && !zombie(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}
