package propagate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// childEnv names the environment variable that turns the test binary into
// one worker process of a benchmark: it holds "endpoints|prefix|id".
const childEnv = "RECONF_PROPAGATE_WORKER"

// childMain runs one worker process: it joins the cluster, follows it, and
// prints "applied <generation> <unix-nanos>" for every version it applies,
// until its stdin closes.
func childMain(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad worker spec")
		return 2
	}
	eps, prefix, id := strings.Split(parts[0], ","), parts[1], parts[2]
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	cli, err := Connect(eps, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	ch, err := NewChannel(cli, prefix, WithWorkerID(id))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := make(chan string, 4096)
	src := &memSource{}
	src.Set(configYAML("gw", 1, "KEY1"))
	env := newEnv("KEY1", canary)
	rt, err := reconf.New[testConfig](ctx, src, ch.Option(), reconf.WithEnv(env.Lookup),
		reconf.WithLogger(quiet),
		reconf.WithObserver(reconf.ObserverFunc(func(r reconf.Result) {
			if r.Outcome == reconf.Published {
				out <- fmt.Sprintf("applied %d %d", r.Generation, time.Now().UnixNano())
			}
		})))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := Follow(ctx, ch, rt, WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "ready %d\n", rt.Current().ID())
	w.Flush()
loop:
	for {
		select {
		case line := <-out:
			fmt.Fprintln(w, line)
			w.Flush()
		case <-done:
			break loop
		}
	}
	_ = f.Close(ctx)
	_ = rt.Close(ctx)
	return 0
}

// child is a worker process started by a benchmark.
type child struct {
	id   string
	cmd  *exec.Cmd
	in   io.WriteCloser
	seen chan stamp
}

func startChild(b *testing.B, eps []string, prefix, id string) *child {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(eps, ",")+"|"+prefix+"|"+id)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &child{id: id, cmd: cmd, in: in, seen: make(chan stamp, 4096)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var g uint64
			var ns int64
			if _, err := fmt.Sscanf(sc.Text(), "applied %d %d", &g, &ns); err == nil {
				c.seen <- stamp{g, time.Unix(0, ns)}
			} else if strings.HasPrefix(sc.Text(), "ready") {
				close(ready)
			}
		}
	}()
	b.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		b.Fatalf("worker process %s not ready", id)
	}
	return c
}

// BenchmarkPropagationProcesses is BenchmarkPropagation with every worker
// but the publisher in its own process (the test binary re-executed), as
// reconfd runs them. Applied times are wall-clock stamps from the workers.
//
//	go test -run '^$' -bench PropagationProcesses -benchtime 300x ./propagate/
func BenchmarkPropagationProcesses(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("embedded/workers=%d", n), func(b *testing.B) {
			s := startServer(b)
			benchProcesses(b, s.Endpoints(), nil, n)
		})
	}
	b.Run("cluster3/workers=4", func(b *testing.B) {
		c := startCluster(b, 3)
		eps := c.Endpoints()
		benchProcesses(b, eps, []string{eps[2], eps[1], eps[0]}, 4)
	})
}

func benchProcesses(b *testing.B, eps, otherEps []string, n int) {
	p := newPrefix()
	pub := startWorker(b, eps, p, "w0", workerOpts{})
	var kids []*child
	for i := 1; i < n; i++ {
		e := eps
		if otherEps != nil && i%2 == 1 {
			e = otherEps
		}
		kids = append(kids, startChild(b, e, p, fmt.Sprintf("w%d", i)))
	}
	followers := make([]applied, len(kids))
	for i, k := range kids {
		followers[i] = applied{k.id, k.seen}
	}
	measurePublishes(b, pub, followers)
}
