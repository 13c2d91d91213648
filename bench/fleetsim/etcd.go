package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/reconfhq/reconf/propagate/embedded"
)

// childEnv marks the re-executed binary as the etcd member's process.
const childEnv = "FLEETSIM_ETCD_CHILD"

// etcdProc is the etcd member, in its own process so that its memory and
// CPU are measured apart from the followers'.
type etcdProc struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	endpoints []string
	exited    chan struct{}
}

// startEtcd re-executes this binary as an embedded etcd member (the same
// member a reconfd supervisor runs) and waits for its endpoint.
func startEtcd() (*etcdProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &etcdProc{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	select {
	case l, ok := <-line:
		if ep, found := strings.CutPrefix(l, "endpoint "); ok && found {
			p.endpoints = []string{ep}
			return p, nil
		}
		p.stop()
		return nil, errors.New("the etcd process did not report its endpoint")
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, errors.New("the etcd process did not start within 30s")
	}
}

// stop closes the member's stdin, which makes it shut down, and waits.
func (p *etcdProc) stop() {
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *etcdProc) pid() int { return p.cmd.Process.Pid }

// etcdChild is the member's process: it serves until its stdin closes.
func etcdChild() error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := embedded.Start(context.Background(), embedded.Config{Logger: log})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf("endpoint %s\n", s.Endpoints()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// etcdCounters are the member's own counters, read from its /metrics.
type etcdCounters struct {
	grpcSent, grpcRecv float64 // gRPC message bytes to and from clients
	proposals          float64 // raft proposals committed (writes)
}

// scrape reads the member's metrics endpoint.
func scrape(ctx context.Context, endpoint string) (etcdCounters, error) {
	// Generous: a race-built member on a loaded machine answers slowly.
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	client, url := http.DefaultClient, endpoint+"/metrics"
	if sock, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		// The embedded member listens on a private unix socket only.
		client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		url = "http://etcd/metrics"
		defer client.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return etcdCounters{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return etcdCounters{}, err
	}
	defer resp.Body.Close()
	var c etcdCounters
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "etcd_network_client_grpc_sent_bytes_total":
			dst = &c.grpcSent
		case "etcd_network_client_grpc_received_bytes_total":
			dst = &c.grpcRecv
		case "etcd_server_proposals_committed_total":
			dst = &c.proposals
		default:
			continue
		}
		*dst, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
	}
	return c, sc.Err()
}
