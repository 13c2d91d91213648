package reconf

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

type staged struct {
	idx int
	p   Prepared
}

// prepare asks every interested consumer, in registration order, and aborts
// the prepared ones in reverse on the first refusal. changes == nil means
// the startup load, which asks every consumer.
func (r *Runtime[T]) prepare(ctx context.Context, prev, next *T, changes []fieldChange) (out []staged, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &Error{Reason: ReasonInternal, Message: "a consumer panicked in Prepare", Err: fmt.Errorf("panic: %v", p)}
		}
		if err != nil {
			r.abortAll(out)
			out = nil
		}
	}()
	for i := range r.o.consumers {
		c := &r.o.consumers[i]
		if changes != nil && !c.interested(changes) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		p, err := c.c.Prepare(ctx, prev, next)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
			}
			return out, &ConsumerError{Consumer: c.name, Err: err}
		}
		if p == nil {
			p = keepValue{} // nothing to rebuild: the previous value stays
		}
		out = append(out, staged{i, p})
		if v, ok := p.(Valuer); ok {
			if val := v.Value(); val != nil && !c.fits(val) {
				return out, &ConsumerError{Consumer: c.name, Err: fmt.Errorf("it attached a %T, but its key holds %s", val, c.valueType)}
			}
		}
	}
	return out, nil
}

func (r *Runtime[T]) abortAll(s []staged) {
	for i := len(s) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.o.logger.Error("reconf: a consumer panicked in Abort", "consumer", r.o.consumers[s[i].idx].name, "panic", p)
				}
			}()
			s[i].p.Abort()
		}()
	}
}

// digest is cand's mutation-check digest, taken before any consumer sees
// it, or 0 when the detector is off.
func (r *Runtime[T]) digest(cand *candidate[T]) uint64 {
	if r.o.mutationMode == MutationOff {
		return 0
	}
	return digestOf(cand.cfg)
}

// digestBeside starts cand's digest on another goroutine, so that it runs
// beside the diff (both only read): a reload of a large configuration is
// waited on for the longer of the two, not their sum. The function it
// returns waits for the digest; it must be called before any consumer
// sees cand, and on every path (a panic in the digest is raised there,
// inside the attempt's guard).
func (r *Runtime[T]) digestBeside(cand *candidate[T]) func() uint64 {
	if r.o.mutationMode == MutationOff {
		return func() uint64 { return 0 }
	}
	type result struct {
		d uint64
		p any
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			res.p = recover()
			ch <- res
		}()
		res.d = digestOf(cand.cfg)
	}()
	return sync.OnceValue(func() uint64 {
		res := <-ch
		if res.p != nil {
			panic(res.p)
		}
		return res.d
	})
}

func (r *Runtime[T]) newGeneration(id uint64, c *candidate[T], digest uint64) *Generation[T] {
	g := &Generation[T]{id: id, cfg: c.cfg, files: c.files, shared: c.sharedFiles(), fileClass: c.fileClass, published: r.o.now(), onRetire: r.retired,
		revisions: c.read.pins.Revisions(),
		logger:    r.o.logger, data: c.data, live: c.live, liveJSON: c.liveJSON, restartPinned: c.pinned}
	g.seen.Store(digest)
	return g
}

// attach gives g its consumer values: new ones from staged consumers that
// are Valuers, the rest carried from prev.
func (r *Runtime[T]) attach(g, prev *Generation[T], st []staged) {
	g.values = make([]*attachment, len(r.o.consumers))
	if prev != nil {
		for i, a := range prev.values {
			if a != nil {
				a.refs.Add(1)
				g.values[i] = a
			}
		}
	}
	for _, s := range st {
		v, ok := s.p.(Valuer)
		if !ok {
			continue
		}
		val := v.Value()
		if val == nil {
			continue // no new value: the carried one stays
		}
		if old := g.values[s.idx]; old != nil {
			old.drop(r.o.logger)
		}
		a := &attachment{name: r.o.consumers[s.idx].name, v: val}
		a.refs.Store(1)
		g.values[s.idx] = a
	}
}
