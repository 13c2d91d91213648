package peers

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	"github.com/reconfhq/reconf"
	"github.com/spf13/viper"
)

// Each benchmark reads the same two values (an int and a string) the way a
// request handler would: reconf through Current() or a pin, viper and koanf
// through their Get* accessors.

var sinkInt int
var sinkStr string

func newReconf(b testing.TB) *reconf.Runtime[Config] {
	rt, err := reconf.New[Config](context.Background(), reconf.Bytes("peers", []byte(Document)),
		reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func newViper(b testing.TB) *viper.Viper {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader([]byte(Document))); err != nil {
		b.Fatal(err)
	}
	return v
}

func newKoanf(b testing.TB) *koanf.Koanf {
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider([]byte(Document)), yaml.Parser()); err != nil {
		b.Fatal(err)
	}
	return k
}

func TestSameValues(t *testing.T) {
	rt, v, k := newReconf(t), newViper(t), newKoanf(t)
	c := rt.Current().Config()
	if c.Routing.MaxAttempts != 2 || v.GetInt("routing.max_attempts") != 2 || k.Int("routing.max_attempts") != 2 {
		t.Fatal("libraries disagree on routing.max_attempts")
	}
	if c.Routing.DefaultRoute != "stub" || v.GetString("routing.default_route") != "stub" || k.String("routing.default_route") != "stub" {
		t.Fatal("libraries disagree on routing.default_route")
	}
}

func BenchmarkReconfCurrent(b *testing.B) {
	rt := newReconf(b)
	b.ReportAllocs()
	for b.Loop() {
		c := rt.Current().Config()
		sinkInt += c.Routing.MaxAttempts
		sinkStr = c.Routing.DefaultRoute
	}
}

func BenchmarkReconfCurrentParallel(b *testing.B) {
	rt := newReconf(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			c := rt.Current().Config()
			n += c.Routing.MaxAttempts + len(c.Routing.DefaultRoute)
		}
		sinkInt += n
	})
}

func BenchmarkReconfAcquireRelease(b *testing.B) {
	rt := newReconf(b)
	b.ReportAllocs()
	for b.Loop() {
		p := rt.Acquire()
		sinkInt += p.Config().Routing.MaxAttempts
		sinkStr = p.Config().Routing.DefaultRoute
		p.Release()
	}
}

func BenchmarkViperGet(b *testing.B) {
	v := newViper(b)
	b.ReportAllocs()
	for b.Loop() {
		sinkInt += v.GetInt("routing.max_attempts")
		sinkStr = v.GetString("routing.default_route")
	}
}

func BenchmarkViperGetParallel(b *testing.B) {
	v := newViper(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += v.GetInt("routing.max_attempts") + len(v.GetString("routing.default_route"))
		}
		sinkInt += n
	})
}

func BenchmarkKoanfGet(b *testing.B) {
	k := newKoanf(b)
	b.ReportAllocs()
	for b.Loop() {
		sinkInt += k.Int("routing.max_attempts")
		sinkStr = k.String("routing.default_route")
	}
}

func BenchmarkKoanfGetParallel(b *testing.B) {
	k := newKoanf(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += k.Int("routing.max_attempts") + len(k.String("routing.default_route"))
		}
		sinkInt += n
	})
}
