package gateway

import (
	"sync"
	"sync/atomic"
	"time"
)

// windowBuckets is the number of buckets a key's window is counted in:
// a sliding window of length per is read as its last windowBuckets
// buckets, so a true sliding window sees at most one bucket's admissions
// more than the limit (1/60 of it in steady use).
const windowBuckets = 60

// slidingCount counts events over a sliding window in windowBuckets
// buckets of equal length. It is not safe for concurrent use (keyLimiter
// locks it).
type slidingCount struct {
	buckets [windowBuckets]int64
	head    int64 // the absolute number of the latest bucket counted
	sum     int64 // the buckets' sum
}

// advance drops the buckets older than the window that ends in bucket b.
func (w *slidingCount) advance(b int64) {
	if b <= w.head {
		return
	}
	if b-w.head >= windowBuckets {
		w.buckets = [windowBuckets]int64{}
		w.sum = 0
	} else {
		for i := w.head + 1; i <= b; i++ {
			j := i % windowBuckets
			w.sum -= w.buckets[j]
			w.buckets[j] = 0
		}
	}
	w.head = b
}

// add counts n in bucket b, the latest or one still in the window.
func (w *slidingCount) add(b, n int64) {
	w.advance(b)
	w.buckets[b%windowBuckets] += n
	w.sum += n
}

// parts sums the window in len(out) equal parts, oldest first (the
// window's buckets are a multiple of them).
func (w *slidingCount) parts(out *[shapeParts]int64) {
	const per = windowBuckets / shapeParts
	for k := range shapeParts {
		var n int64
		for i := range per {
			n += w.buckets[(w.head+1+int64(k*per+i))%windowBuckets]
		}
		out[k] = n
	}
}

// freeAt returns the bucket in which the window's count first drops
// below limit as old buckets leave it, or b+windowBuckets when it never
// does on its own.
func (w *slidingCount) freeAt(b, limit int64) int64 {
	sum := w.sum
	for i := b - windowBuckets + 1; i <= b; i++ {
		if sum < limit {
			return i + windowBuckets - 1
		}
		sum -= w.buckets[((i%windowBuckets)+windowBuckets)%windowBuckets]
	}
	return b + windowBuckets
}

// keyLimiter is one client key name's use against its limits over a
// sliding window, for the life of the gateway (keyLimiters hands out one
// per name), so a reload that changes a key's limits keeps its use. In a
// fleet its allowance is this worker's share of the fleet's limit (see
// keyShare); alone it is the whole limit. Its methods are safe for
// concurrent use and allocate nothing.
type keyLimiter struct {
	name string

	mu     sync.Mutex
	bucket time.Duration // the window's length / windowBuckets
	reqs   slidingCount  // requests admitted
	toks   slidingCount  // tokens charged
	denied int64         // requests refused, for status and metrics

	// Tokens are charged without the lock, at the end of every answer:
	// pending holds them until the next holder of the lock folds them
	// into toks (foldLocked), in the bucket of chargedAt, the latest
	// time charged so far (unix nanoseconds), so a charge never counts in
	// a bucket before its own.
	pending   atomic.Int64
	chargedAt atomic.Int64

	// A tokens limit counts an answer only when it ends, so the requests
	// in flight would be unbounded below it: each holds a reservation
	// (see hold) while it runs. reserved is their sum, perAnswer a
	// running mean of the tokens charged an answer (0: none yet). Both
	// change without the lock; admissions read them under it.
	reserved  atomic.Int64
	perAnswer atomic.Int64

	// share, when set, gives this worker's allowance of a fleet-wide
	// limit; nil admits up to the whole limit.
	share *keyShare
}

// setWindow sets the window's length; a new length starts counting
// afresh.
func (l *keyLimiter) setWindowLocked(per time.Duration) {
	b := per / windowBuckets
	if b <= 0 {
		b = time.Millisecond
	}
	if b != l.bucket {
		l.bucket = b
		l.reqs, l.toks = slidingCount{}, slidingCount{}
		if l.share != nil {
			l.share.asked = slidingCount{}
		}
	}
}

// Before any of a tokens-limited key's answers was charged, a request
// holds a coldInFlight-th of the limit, or coldAnswerTokens (a long
// answer's tokens) when less: a small limit admits coldInFlight requests
// at once until the mean of its answers is known, and a large one is not
// held to that many by a reservation far above any answer.
const (
	coldInFlight     = 16
	coldAnswerTokens = 4096
)

// hold is the reservation a request of sent bytes holds against a tokens
// limit while it runs: the mean tokens of the key's answers, or its own
// bytes over bytesPerToken when more; before any answer, at least
// limit/coldInFlight or coldAnswerTokens, whichever is less.
func (l *keyLimiter) hold(limit int64, sent int) int64 {
	h := max(l.perAnswer.Load(), textTokens(sent), 1)
	if l.perAnswer.Load() == 0 {
		h = max(h, min(limit/coldInFlight, coldAnswerTokens))
	}
	return h
}

// admit counts a request at now if the key is within its limits (lim)
// and reports whether it did; when it did not, wait is how long until the
// window has room again. It holds no reservation (see admitHolding).
func (l *keyLimiter) admit(now time.Time, lim *KeyLimits) (ok bool, wait time.Duration) {
	l.mu.Lock()
	ok, wait = l.admitLocked(now, lim, 0)
	l.mu.Unlock()
	return ok, wait
}

// admitHolding is admit for a request of sent bytes that, under a tokens
// limit, holds a reservation while it runs: it is admitted while the
// window's tokens and the reservations held are below the limit, so the
// requests in flight are bounded. held is the reservation, which the
// caller gives back with release when the request ends.
func (l *keyLimiter) admitHolding(now time.Time, lim *KeyLimits, sent int) (ok bool, wait time.Duration, held int64) {
	if lim.Tokens > 0 {
		held = l.hold(lim.Tokens, sent)
	}
	l.mu.Lock()
	ok, wait = l.admitLocked(now, lim, held)
	l.mu.Unlock()
	if !ok {
		held = 0
	}
	return ok, wait, held
}

// release gives back a reservation admitHolding returned.
func (l *keyLimiter) release(held int64) {
	if held != 0 {
		l.reserved.Add(-held)
	}
}

// admitLocked is admit with l.mu held, taking a reservation of held
// tokens when it admits.
func (l *keyLimiter) admitLocked(now time.Time, lim *KeyLimits, held int64) (ok bool, wait time.Duration) {
	l.setWindowLocked(lim.Per)
	b := now.UnixNano() / int64(l.bucket)
	l.reqs.advance(b)
	l.toks.advance(b)
	l.foldLocked()
	reqLimit, tokLimit := lim.Requests, lim.Tokens
	reserved := l.reserved.Load()
	if l.share != nil {
		// A fleet's limit: this worker's share decides; the window is
		// counted for the reports, and for Retry-After.
		l.share.asked.add(b, 1)
		inBucket := l.reqs.buckets[b%windowBuckets]
		if !l.share.take([2]int64{l.reqs.sum, l.toks.sum + reserved}, inBucket, [2]int64{reqLimit, tokLimit}) {
			l.denied++
			return false, l.bucket * 2
		}
		l.reqs.add(b, 1)
		l.reserved.Add(held)
		return true, 0
	}
	if lim.Requests > 0 && l.reqs.sum >= reqLimit {
		l.denied++
		return false, l.waitLocked(now, b, l.reqs.freeAt(b, reqLimit))
	}
	if lim.Tokens > 0 && l.toks.sum+reserved >= tokLimit {
		l.denied++
		if l.toks.sum < tokLimit {
			// Room held by requests in flight: it comes back as they
			// end, long before the window slides.
			return false, 2 * l.bucket
		}
		return false, l.waitLocked(now, b, l.toks.freeAt(b, tokLimit))
	}
	l.reqs.add(b, 1)
	l.reserved.Add(held)
	return true, 0
}

// waitLocked is the time from now to the start of bucket free.
func (l *keyLimiter) waitLocked(now time.Time, b, free int64) time.Duration {
	_ = b
	return time.Duration(free*int64(l.bucket) - now.UnixNano())
}

// charge counts tokens used by an answer at now. It takes no lock: the
// next admission, status read or fleet tick counts them (foldLocked).
func (l *keyLimiter) charge(now time.Time, tokens int64) {
	if tokens <= 0 {
		return
	}
	// The time first: a fold that takes these tokens then reads this
	// time or a later one. Kept as the latest time, not the last one
	// stored: two answers ending together may charge in either order,
	// and the earlier time must not carry the other's tokens into an
	// earlier bucket, out of the window before their time.
	ns := now.UnixNano()
	for {
		at := l.chargedAt.Load()
		if ns <= at || l.chargedAt.CompareAndSwap(at, ns) {
			break
		}
	}
	l.pending.Add(tokens)
	// The mean an answer, an eighth of the way to each new one; an
	// update lost to a concurrent one only slows it.
	m := l.perAnswer.Load()
	if m == 0 {
		l.perAnswer.Store(tokens)
	} else {
		l.perAnswer.Store(max(1, m+(tokens-m)/8))
	}
}

// foldLocked counts the pending charges in toks, whose window has been
// advanced; a charge older than the window is dropped, as it would have
// left it.
func (l *keyLimiter) foldLocked() {
	if l.pending.Load() == 0 || l.bucket == 0 {
		return
	}
	n := l.pending.Swap(0)
	b := min(l.chargedAt.Load()/int64(l.bucket), l.toks.head)
	if b <= l.toks.head-windowBuckets {
		return
	}
	l.toks.add(b, n)
}

// keyUse is a key's use in its current window, for status and metrics.
type keyUse struct {
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
	Denied   int64 `json:"denied_total"`
}

// use returns the key's use in the window ending at now.
func (l *keyLimiter) use(now time.Time) keyUse {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bucket == 0 {
		return keyUse{Denied: l.denied}
	}
	b := now.UnixNano() / int64(l.bucket)
	l.reqs.advance(b)
	l.toks.advance(b)
	l.foldLocked()
	return keyUse{Requests: l.reqs.sum, Tokens: l.toks.sum, Denied: l.denied}
}

// keyLimiters hands out the long-lived limiter of each key name.
type keyLimiters struct {
	mu sync.Mutex
	m  map[string]*keyLimiter
	// share, when set, makes each limiter's allowance its share of the
	// fleet's limit.
	share func(name string) *keyShare
}

// limiter returns name's limiter, creating it on first use.
func (s *keyLimiters) limiter(name string) *keyLimiter {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.m[name]; l != nil {
		return l
	}
	if s.m == nil {
		s.m = make(map[string]*keyLimiter)
	}
	l := &keyLimiter{name: name}
	if s.share != nil {
		l.share = s.share(name)
	}
	s.m[name] = l
	return l
}

// each calls fn with every limiter handed out so far.
func (s *keyLimiters) each(fn func(*keyLimiter)) {
	s.mu.Lock()
	ls := make([]*keyLimiter, 0, len(s.m))
	for _, l := range s.m {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		fn(l)
	}
}
