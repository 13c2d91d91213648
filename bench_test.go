package reconf

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/testkit"
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
	rt, err := New[testConfig](context.Background(), Bytes("bench", []byte(baseYAML(1))), WithEnv(noEnv), WithLogger(discardLogger()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

var sink int

// BenchmarkCurrent measures a read as a request handler makes it: inlined,
// its result used. It counts with b.N rather than b.Loop, whose own
// bookkeeping costs about as much as the read on this class of machine
// (BenchmarkLoopOverhead), and sums locally so that the figure is the read's,
// not a store to a global on every iteration.
func BenchmarkCurrent(b *testing.B) {
	rt := benchRuntime(b)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for range b.N {
		n += rt.Current().Config().Routing.MaxAttempts
	}
	sink += n
}

// BenchmarkLoopOverhead is the cost of b.Loop's iteration alone, the part of
// a b.Loop benchmark of Current that is not the read.
func BenchmarkLoopOverhead(b *testing.B) {
	n := 0
	for b.Loop() {
		n++
	}
	sink += n
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
// source between two renderings, so every reload publishes. The mutation
// detector is on, as it is by default; benchReloads runs it side by side
// with the detector off, to show what detection costs.
func benchReload(b *testing.B, routes int, mode MutationMode) {
	docs := [2][]byte{benchYAML(routes, 1), benchYAML(routes, 2)}
	var i int
	src := SourceFunc("bench", func(context.Context, ReadRequest) (Snapshot, error) {
		return Snapshot{Data: docs[i%2]}, nil
	})
	rt, err := New[benchConfig](context.Background(), src, WithLogger(discardLogger()), WithMutationCheck(mode))
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

func benchReloads(b *testing.B, routes int) {
	b.Run("detector=on", func(b *testing.B) { benchReload(b, routes, MutationLog) })
	b.Run("detector=off", func(b *testing.B) { benchReload(b, routes, MutationOff) })
}

func BenchmarkReloadSmall(b *testing.B) { benchReloads(b, 10) }
func BenchmarkReloadLarge(b *testing.B) { benchReloads(b, 5000) }

// BenchmarkParseLarge parses the file BenchmarkReloadLarge reloads into
// YAML nodes, nothing more: the floor a reload is measured against (issue:
// a reload costs at most 1.2x this, in the same run).
func BenchmarkParseLarge(b *testing.B) {
	data := benchYAML(5000, 1)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseOne(context.Background(), data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReloadLargeVsParse alternates a reload of the large file with
// a parse of it into nodes and reports their ratio (aim: at most 1.2), so
// load on a shared machine moves both sides alike.
func BenchmarkReloadLargeVsParse(b *testing.B) {
	docs := [2][]byte{benchYAML(5000, 1), benchYAML(5000, 2)}
	var i int
	src := SourceFunc("bench", func(context.Context, ReadRequest) (Snapshot, error) {
		return Snapshot{Data: docs[i%2]}, nil
	})
	rt, err := New[benchConfig](context.Background(), src, WithLogger(discardLogger()))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	var reload, parse, reloadCPU, parseCPU time.Duration
	for b.Loop() {
		i++
		start, startCPU := time.Now(), testkit.CPUTime()
		if res, err := rt.Reload(context.Background(), TriggerSDK); err != nil || res.Outcome != Published {
			b.Fatalf("reload: %s %v", res.Outcome, err)
		}
		mid, midCPU := time.Now(), testkit.CPUTime()
		if _, err := parseOne(context.Background(), docs[i%2]); err != nil {
			b.Fatal(err)
		}
		end, endCPU := time.Now(), testkit.CPUTime()
		reload, parse = reload+mid.Sub(start), parse+end.Sub(mid)
		reloadCPU, parseCPU = reloadCPU+midCPU-startCPU, parseCPU+endCPU-midCPU
	}
	b.ReportMetric(float64(reload)/float64(parse), "reload/parse")
	b.ReportMetric(float64(parse.Milliseconds())/float64(b.N), "parse-ms")
	if parseCPU > 0 {
		// The same ratio in process CPU time (the collector's included),
		// which a busy machine inflates far less than wall time.
		b.ReportMetric(float64(reloadCPU)/float64(parseCPU), "cpu-reload/parse")
	}
}

// aliasYAML is a valid testConfig with n model aliases, 16 bytes each: n =
// 130,000 is just under the 2 MiB size bound.
func aliasYAML(n int, unknown bool) []byte {
	var b strings.Builder
	b.WriteString(baseYAML(1))
	for i := range n {
		if unknown {
			fmt.Fprintf(&b, "u%07d: x\n", i) // 12 bytes, at the top level
			continue
		}
		fmt.Fprintf(&b, "  a%06d: stub\n", i)
	}
	return []byte(b.String())
}

// BenchmarkLoadAliases is the load-time curve: compiling a configuration
// with N map entries must grow linearly (the old decoder's duplicate check
// made it quadratic: 90k took 119 s).
func BenchmarkLoadAliases(b *testing.B) {
	for _, n := range []int{10000, 30000, 90000, 130000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			data := aliasYAML(n, false)
			c := compiler[testConfig]{lookupEnv: noEnv}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := c.compile(context.Background(), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoadUnknownFields: a file of N unknown fields is refused in
// linear time too.
func BenchmarkLoadUnknownFields(b *testing.B) {
	for _, n := range []int{10000, 40000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			data := aliasYAML(n, true)
			c := compiler[testConfig]{lookupEnv: noEnv}
			for b.Loop() {
				if _, err := c.compile(context.Background(), data); err == nil {
					b.Fatal("unknown fields accepted")
				}
			}
		})
	}
}

// BenchmarkCancelMidDecode cancels the compile of a 2 MiB file 20 ms in
// and reports how long it took to return after the cancel (the aim is
// under 100 ms).
func BenchmarkCancelMidDecode(b *testing.B) {
	data := aliasYAML(130000, false)
	c := compiler[testConfig]{lookupEnv: noEnv}
	var worst time.Duration
	var total time.Duration
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var canceled atomic.Int64
		t := time.AfterFunc(20*time.Millisecond, func() { canceled.Store(time.Now().UnixNano()); cancel() })
		_, err := c.compile(ctx, data)
		returned := time.Now().UnixNano()
		t.Stop()
		cancel()
		if err == nil {
			b.Fatal("the compile finished before the cancel")
		}
		if at := canceled.Load(); at != 0 {
			d := time.Duration(returned - at)
			total += d
			worst = max(worst, d)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-after-cancel")
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms-after-cancel")
}

// benchApply measures a follower's apply of a cluster record (decode over
// the local source, compile, diff, publish, commit), each iteration a new
// version alternating two renderings, with the record as format encodes
// it: side by side, the YAML records of earlier versions and formatJSON.
func benchApply(b *testing.B, routes int, format string) {
	var recs [2]fleet.Record
	for i := range recs {
		c := &compiler[benchConfig]{propagated: true}
		cand, err := c.compile(context.Background(), benchYAML(routes, i+1))
		if err != nil {
			b.Fatal(err)
		}
		recs[i].Live, recs[i].Format, err = encodePayload(cand.cfg)
		if format == formatYAML {
			recs[i].Live, recs[i].Format, err = must(encodeLive(cand.cfg)), formatYAML, nil
		}
		if err != nil || recs[i].Format != format {
			b.Fatalf("encoding: %v %q", err, recs[i].Format)
		}
	}
	ch := &faultChannel{}
	rt, err := New[benchConfig](context.Background(), Bytes("bench", benchYAML(routes, 1)), withChannel(ch), WithLogger(discardLogger()))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	b.SetBytes(int64(len(recs[0].Live)))
	b.ReportAllocs()
	v := rt.Current().ID()
	for b.Loop() {
		v++
		res, err := rt.applyVersion(context.Background(), v, recs[v%2])
		if err != nil || res.Outcome != Published {
			b.Fatalf("apply: %s %s %v", res.Outcome, res.Message, err)
		}
	}
}

func must[V any](v V, err error) V {
	if err != nil {
		panic(err)
	}
	return v
}

func BenchmarkApplySmall(b *testing.B) {
	b.Run("yaml", func(b *testing.B) { benchApply(b, 10, formatYAML) })
	b.Run("json", func(b *testing.B) { benchApply(b, 10, formatJSON) })
}

func BenchmarkApplyLarge(b *testing.B) {
	b.Run("yaml", func(b *testing.B) { benchApply(b, 5000, formatYAML) })
	b.Run("json", func(b *testing.B) { benchApply(b, 5000, formatJSON) })
}

// BenchmarkMutationDigest is the detector's cost per digest; a publish
// takes three (at publish, at the next attempt, at retire).
func BenchmarkMutationDigest(b *testing.B) {
	for _, n := range []int{10, 5000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			var c compiler[benchConfig]
			cand, err := c.compile(context.Background(), benchYAML(n, 1))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				sink += int(digestOf(cand.cfg) & 1)
			}
		})
	}
}

// BenchmarkDetectorCost alternates a reload on a runtime with the mutation
// detector on and one with it off, and reports on/off (aim: at most 1.05),
// so load on a shared machine moves both sides alike.
func BenchmarkDetectorCost(b *testing.B) {
	for _, routes := range []int{10, 5000} {
		b.Run(fmt.Sprintf("routes=%d", routes), func(b *testing.B) {
			docs := [2][]byte{benchYAML(routes, 1), benchYAML(routes, 2)}
			var i int
			src := SourceFunc("bench", func(context.Context, ReadRequest) (Snapshot, error) {
				return Snapshot{Data: docs[i%2]}, nil
			})
			var rts [2]*Runtime[benchConfig]
			for k, mode := range []MutationMode{MutationLog, MutationOff} {
				rt, err := New[benchConfig](context.Background(), src, WithLogger(discardLogger()), WithMutationCheck(mode))
				if err != nil {
					b.Fatal(err)
				}
				defer rt.Close(context.Background())
				rts[k] = rt
			}
			var took [2]time.Duration
			for b.Loop() {
				i++
				for k := range rts {
					start := time.Now()
					if res, err := rts[(k+i)%2].Reload(context.Background(), TriggerSDK); err != nil || res.Outcome != Published {
						b.Fatalf("reload: %s %v", res.Outcome, err)
					}
					took[(k+i)%2] += time.Since(start)
				}
			}
			b.ReportMetric(float64(took[0])/float64(took[1]), "on/off")
		})
	}
}

func BenchmarkAcquireFor(b *testing.B) {
	entities := make([]string, 1024)
	for i := range entities {
		entities[i] = fmt.Sprintf("client-key-%04d", i)
	}
	for _, staged := range []bool{false, true} {
		name := "rollout=none"
		if staged {
			name = "rollout=50%"
		}
		b.Run(name, func(b *testing.B) {
			src := newMem(baseYAML(1))
			rt, err := New[testConfig](context.Background(), src, WithEnv(noEnv), WithLogger(discardLogger()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = rt.Close(context.Background()) })
			if staged {
				src.set(baseYAML(2))
				s := linear50PercentEvery30Seconds()
				s.StepInterval = time.Hour
				if res, _ := rt.Stage(context.Background(), TriggerSDK, s); res.Reason != ReasonRolloutStarted {
					b.Fatal(res.Reason)
				}
			}
			b.ReportAllocs()
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p := rt.AcquireFor(entities[i&1023])
					sink += p.Config().Routing.MaxAttempts
					p.Release()
					i++
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					n, i := 0, 0
					for pb.Next() {
						p := rt.AcquireFor(entities[i&1023])
						n += p.Config().Routing.MaxAttempts
						p.Release()
						i++
					}
					sink += n
				})
			})
		})
	}
}
