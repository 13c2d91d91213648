package reconf

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

type benchRoute struct {
	Name     string            `yaml:"name"`
	Prefix   string            `yaml:"prefix" validate:"required"`
	Upstream string            `yaml:"upstream" validate:"required"`
	Timeout  time.Duration     `yaml:"timeout" default:"30s"`
	Weight   int               `yaml:"weight" validate:"min=0,max=1000"`
	Retries  int               `yaml:"retries" default:"2"`
	Headers  map[string]string `yaml:"headers"`
}

type benchConfig struct {
	Listen string       `yaml:"listen" reconf:"restart"`
	Epoch  int          `yaml:"epoch" reconf:"live"`
	Routes []benchRoute `yaml:"routes" reconf:"live"`
}

// benchYAML renders n routes; epoch makes two renderings differ.
func benchYAML(n, epoch int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:8080\nepoch: %d\nroutes:\n", epoch)
	for i := range n {
		fmt.Fprintf(&b, `  - name: route-%05d
    prefix: /api/v1/tenants/%05d/models/completions
    upstream: http://backend-%03d.internal.example:8080/v1
    timeout: %ds
    weight: %d
    retries: 3
    headers:
      x-tenant: tenant-%05d
      x-route-class: standard-priority-lane
`, i, i, i%97, 10+i%20, i%100, i)
	}
	return []byte(b.String())
}

func benchRuntime(b *testing.B) *Runtime[testConfig] {
	rt, err := New[testConfig](context.Background(), Bytes("bench", []byte(baseYAML(1))), WithEnv[testConfig](noEnv), WithLogger[testConfig](discardLogger()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

var sink int

func BenchmarkCurrent(b *testing.B) {
	rt := benchRuntime(b)
	b.ReportAllocs()
	for b.Loop() {
		sink += rt.Current().Config().Routing.MaxAttempts
	}
}

func BenchmarkCurrentParallel(b *testing.B) {
	rt := benchRuntime(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += rt.Current().Config().Routing.MaxAttempts
		}
		sink += n
	})
}

func BenchmarkAcquireRelease(b *testing.B) {
	rt := benchRuntime(b)
	b.ReportAllocs()
	for b.Loop() {
		p := rt.Acquire()
		sink += p.Config().Routing.MaxAttempts
		p.Release()
	}
}

func BenchmarkAcquireReleaseParallel(b *testing.B) {
	rt := benchRuntime(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			p := rt.Acquire()
			n += p.Config().Routing.MaxAttempts
			p.Release()
		}
		sink += n
	})
}

// rwBaseline is the hand-rolled alternative: a struct behind an RWMutex.
type rwBaseline struct {
	mu  sync.RWMutex
	cfg *testConfig
}

func (r *rwBaseline) maxAttempts() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cfg.Routing.MaxAttempts
}

func newBaseline() *rwBaseline {
	c := &testConfig{}
	c.Routing.MaxAttempts = 2
	return &rwBaseline{cfg: c}
}

func BenchmarkRWMutexBaseline(b *testing.B) {
	r := newBaseline()
	b.ReportAllocs()
	for b.Loop() {
		sink += r.maxAttempts()
	}
}

func BenchmarkRWMutexBaselineParallel(b *testing.B) {
	r := newBaseline()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += r.maxAttempts()
		}
		sink += n
	})
}

// benchReload measures trigger to published: each iteration swaps the
// source between two renderings, so every reload publishes.
func benchReload(b *testing.B, routes int) {
	docs := [2][]byte{benchYAML(routes, 1), benchYAML(routes, 2)}
	var i int
	src := SourceFunc("bench", func(context.Context, ReadRequest) (Snapshot, error) {
		return Snapshot{Data: docs[i%2]}, nil
	})
	rt, err := New[benchConfig](context.Background(), src, WithLogger[benchConfig](discardLogger()))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	b.SetBytes(int64(len(docs[0])))
	b.ReportAllocs()
	for b.Loop() {
		i++
		res, err := rt.Reload(context.Background(), TriggerSDK)
		if err != nil || res.Outcome != Published {
			b.Fatalf("reload: %s %v", res.Outcome, err)
		}
	}
}

func BenchmarkReloadSmall(b *testing.B) { benchReload(b, 10) }
func BenchmarkReloadLarge(b *testing.B) { benchReload(b, 5000) }
