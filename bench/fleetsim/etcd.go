//go:build linux

package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// etcdCounters are the member's own counters, read from its /metrics.
type etcdCounters struct {
	grpcSent, grpcRecv float64 // gRPC message bytes to and from clients
	proposals          float64 // raft proposals committed (writes)
	// messages counts gRPC messages by direction and method ("recv
	// LeaseKeepAlive", "sent Watch"): what each mechanism sends at rest.
	messages map[string]float64
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
	c := etcdCounters{messages: make(map[string]float64)}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if dir, method, ok := grpcMessages(name); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
			c.messages[dir+" "+method] += v
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

// grpcMessages recognizes a per-method message counter of etcd's gRPC
// server, such as grpc_server_msg_received_total{grpc_method="Watch",...}.
func grpcMessages(name string) (dir, method string, ok bool) {
	var labels string
	switch {
	case strings.HasPrefix(name, "grpc_server_msg_received_total{"):
		dir, labels = "recv", strings.TrimPrefix(name, "grpc_server_msg_received_total")
	case strings.HasPrefix(name, "grpc_server_msg_sent_total{"):
		dir, labels = "sent", strings.TrimPrefix(name, "grpc_server_msg_sent_total")
	default:
		return "", "", false
	}
	_, rest, found := strings.Cut(labels, `grpc_method="`)
	if !found {
		return "", "", false
	}
	method, _, found = strings.Cut(rest, `"`)
	return dir, method, found
}
