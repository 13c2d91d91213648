//go:build linux

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// This file counts how a server's client connections are spread over its
// processes: with two worker processes sharing one listening socket, the
// kernel and the workers' accept loops decide which worker takes each of
// the load generator's connections, and a worker with more than its half
// serves them more slowly (its queue is longer), which shows in the p99.

// connSpread returns, for each process of pids that holds any, the number
// of established TCP connections whose local port is addr's, sorted from
// most to least.
func connSpread(pids []int, addr string) []int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil
	}
	inodes := establishedOn(port)
	var out []int
	for _, pid := range pids {
		n := 0
		ents, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
		for _, e := range ents {
			l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", e.Name()))
			if err != nil {
				continue
			}
			ino, ok := strings.CutPrefix(l, "socket:[")
			if ok && inodes[strings.TrimSuffix(ino, "]")] {
				n++
			}
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// establishedOn returns the socket inodes of the established TCP
// connections (IPv4) whose local port is port.
func establishedOn(port int) map[string]bool {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
		if len(fs) < 10 || !strings.HasSuffix(fs[1], want) || fs[3] != "01" {
			continue
		}
		out[fs[9]] = true
	}
	return out
}

// spreadText renders a spread as "20/12".
func spreadText(s []int) string {
	if len(s) == 0 {
		return "-"
	}
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, "/")
}
