//go:build linux

package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// channel is an etcd member for a fleet of several hosts, served to them
// on a TCP address (the member listens on a unix socket, and --cluster
// takes http URLs).
type channel struct {
	etcd *embedded.Server
	ln   net.Listener
	url  string
	wg   sync.WaitGroup
	mu   sync.Mutex
	open []net.Conn
}

func startChannel() (*channel, error) {
	s, err := embedded.Start(context.Background(), embedded.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	sock := strings.TrimPrefix(s.Endpoints()[0], "unix://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, err
	}
	c := &channel{etcd: s, ln: ln, url: "http://" + ln.Addr().String()}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", sock)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.open = append(c.open, in, out)
			c.mu.Unlock()
			c.wg.Add(2)
			go func() { defer c.wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer c.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return c, nil
}

func (c *channel) close() {
	c.ln.Close()
	c.mu.Lock()
	for _, conn := range c.open {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.etcd.Close()
}
