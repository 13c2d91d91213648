package reconf

import (
	"github.com/reconfhq/reconf/internal/fleet"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Generation is an immutable, published configuration with a monotonic ID.
// Generation 1 is the startup load. A Generation stays usable for as long as
// a Pin holds it; the configuration it returns must be treated as read-only
// (a modification is detected and reported; see WithMutationCheck). Its methods are safe for concurrent use.
type Generation[T any] struct {
	id        uint64
	cfg       *T
	published time.Time
	files     map[string]string // digests of files that file fields name
	fileClass map[string]fieldClass
	revisions map[string]string // atomic-writer mount -> revision its files came from

	fpOnce      sync.Once
	fingerprint string // of the bootstrap fields, computed on first use

	shared     map[string]string // digests of the files a record carries (not hostfile ones)
	liveOnce   sync.Once
	liveDigest string // of the live fields as a record carries them, computed on first use

	// values are the consumers' per-generation attachments, by consumer
	// index; a consumer that did not change shares its predecessor's.
	values []*attachment

	// pins counts holds in cache-line-sized shards, so goroutines pinning
	// on different cores do not fight over one counter.
	pins     [pinShards]pinShard
	replaced atomic.Bool // no longer active
	retired  atomic.Bool // retire has run

	hookMu sync.Mutex
	hooks  []func()

	onRetire func(*Generation[T]) // the runtime's bookkeeping
	logger   *slog.Logger         // the runtime's (WithLogger)

	// seen is the configuration's digest at publish, or the last one a
	// mutation was reported for; data and live are the bytes it was
	// compiled from, compiled again to name the paths of a mutation.
	seen          atomic.Uint64
	data, live    []byte
	liveJSON      bool // live is formatJSON, not YAML
	restartPinned bool // compiled with the process's restart values (restartopt.Restart.Values)
	// atSwap is set while the swap that replaces the generation runs,
	// right after its mutation check: a retire then needs no second one.
	atSwap atomic.Bool
}

// ID returns the generation's number. In a cluster it is the cluster
// version, the same on every worker.
func (g *Generation[T]) ID() uint64 { return g.id }

// Config returns the configuration. It must not be modified.
func (g *Generation[T]) Config() *T { return g.cfg }

// Published returns when the generation became active.
func (g *Generation[T]) Published() time.Time { return g.published }

// bootstrapFingerprint digests the generation's bootstrap fields.
func (g *Generation[T]) bootstrapFingerprint() string {
	g.fpOnce.Do(func() {
		g.fingerprint = fingerprintOf(flattenBootstrap(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(g.cfg).Elem()), nil)
	})
	return g.fingerprint
}

// appliedDigest is the Digest of the record the generation's
// configuration makes (its live fields and shared file digests): every
// worker that holds the same version of the same configuration reports
// the same value, so a fleet can check that a version is byte-identical
// wherever it was applied.
func (g *Generation[T]) appliedDigest() string {
	g.liveOnce.Do(func() {
		live, format, err := encodePayload(g.cfg)
		if err != nil {
			g.liveDigest = "unencodable"
			return
		}
		g.liveDigest = fleet.Record{Live: live, Format: format, Files: g.shared}.Digest()
	})
	return g.liveDigest
}

// value returns the value consumer name attached to this generation (see
// Valuer), or nil; Key.Get reads it typed.
func (g *Generation[T]) value(name string) any {
	for _, a := range g.values {
		if a != nil && a.name == name {
			return a.v
		}
	}
	return nil
}

// OnRetire registers fn to run once, when the generation is no longer
// active and its last pin is released. If it has already retired, fn runs
// at once. Hooks run on the goroutine that released the last pin, so they
// must be quick; hand slow work to a goroutine of your own.
func (g *Generation[T]) OnRetire(fn func()) {
	g.hookMu.Lock()
	if g.retired.Load() {
		g.hookMu.Unlock()
		fn()
		return
	}
	g.hooks = append(g.hooks, fn)
	g.hookMu.Unlock()
}

// pinShards is the number of pin counters per generation.
const (
	pinShardBits = 4
	pinShards    = 1 << pinShardBits
)

type pinShard struct {
	n atomic.Int64
	_ [56]byte // pad to a cache line
}

// hold adds a pin and returns its shard. The shard is picked from the
// address of the caller's stack: free to compute, stable for a goroutine,
// and different for goroutines that run side by side. It is only a hint
// for spreading writes; correctness never depends on it.
func (g *Generation[T]) hold() uint32 {
	var here byte
	h := uint64(uintptr(unsafe.Pointer(&here))>>10) * 0x9E3779B97F4A7C15
	i := uint32(h >> (64 - pinShardBits))
	g.pins[i].n.Add(1)
	return i
}

// pinned returns the number of holds.
func (g *Generation[T]) pinned() int64 {
	var n int64
	for i := range g.pins {
		n += g.pins[i].n.Load()
	}
	return n
}

// release drops the hold on shard i and retires the generation if it was
// the last one and the generation is no longer active.
//
// Every hold that counts was added before the generation was replaced (an
// Acquire that sees a replaced generation drops its hold and retries), and
// every releaser sums the shards after its own decrement, so the last
// releaser of a replaced generation sees zero; retire runs once.
func (g *Generation[T]) release(i uint32) {
	if g.pins[i].n.Add(-1) < 0 {
		panic("reconf: Pin released more than once")
	}
	if g.replaced.Load() && g.pinned() == 0 {
		g.retire()
	}
}

// replace marks the generation as no longer active. It pairs with release:
// whichever of the two observes the other's write retires the generation,
// and retire runs once whatever the interleaving.
func (g *Generation[T]) replace() {
	g.replaced.Store(true)
	if g.pinned() == 0 {
		g.retire()
	}
}

func (g *Generation[T]) retire() {
	g.hookMu.Lock()
	if !g.retired.CompareAndSwap(false, true) {
		g.hookMu.Unlock()
		return
	}
	hooks := g.hooks
	g.hooks = nil
	g.hookMu.Unlock()
	for _, h := range hooks {
		runHook(g.logger, h)
	}
	for _, a := range g.values {
		a.drop(g.logger)
	}
	if g.onRetire != nil {
		g.onRetire(g)
	}
}

// runHook runs a hook of the user's, logging a panic instead of passing it
// to the goroutine that happened to release the last pin.
func runHook(l *slog.Logger, h func()) {
	defer func() {
		if p := recover(); p != nil {
			l.Error("reconf: a hook panicked", "panic", p)
		}
	}()
	h()
}

// attachment is a consumer's value shared by the generations that carry it;
// it is closed when the last of them retires.
type attachment struct {
	name string
	v    any
	refs atomic.Int64
}

func (a *attachment) drop(l *slog.Logger) {
	if a == nil || a.refs.Add(-1) != 0 {
		return
	}
	if c, ok := a.v.(io.Closer); ok {
		if err := c.Close(); err != nil {
			l.Warn("reconf: closing a retired consumer value failed", "consumer", a.name, "error", err)
		}
	}
}
