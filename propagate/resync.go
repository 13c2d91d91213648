package propagate

import (
	"math/rand/v2"
	"time"
)

// readEvery is how many resync intervals pass between two resync reads
// while the watch proves itself live but this worker's row is not watched
// (see rowWatch): the read then also finds it gone (deleted under a live
// lease) and its host's record gone (lapsed with another worker's lease).
// With the default interval it is one read every 10 seconds.
const readEvery = 5

// hostReadEvery is the same while the row is watched: the read then looks
// for the host's record alone, which is not watched (every worker of a
// host writes it with each of its row writes, so a watch of it by each
// would cost etcd workers-per-host squared events per reload). A record
// lapses 15 minutes after the last worker that wrote it died; a minute
// more before another writes it again changes only how a host whose
// workers all die in that minute shows. With the default interval it is
// one read a minute.
const hostReadEvery = 30

// resyncPlan decides when the follower makes sure its watch missed
// nothing. A read of the record's version from every follower every
// interval was most of a fleet's cost at rest (1,000 linearizable reads a
// second for 1,000 workers), and so, after it, was a progress request
// from every follower every two thirds of a second, and then the lease
// renewals every eighth of the lease time whose answers proved the watch.
//
// Any response of the watch, an event or a progress notification, proves
// it missed nothing up to the moment it arrives: etcd sends a
// notification only once every event up to its current revision was
// delivered on the stream, which proves what a read finding nothing
// newer proves. So does the answer to a lease renewal that carries a
// store revision the watch has already reached (WithLeaseAnswers):
// nothing was written since, so nothing was missed.
//
// While proofs keep coming the follower does nothing. A watch unproven
// for askAfter asks for a proof (stepProve): a lease renewal where the
// follower can ask for one (WithLeaseRenewal) and its answer can prove
// (the store has not moved past the watch), else a progress request (one
// message on the watch's stream, no read). One still unproven at the end
// of the interval is read. A version the watch lost after its last proof
// is so found within one interval of that proof. At rest that is one
// renewal and its answer per askAfter plus a round trip: the renewal the
// lease needs anyway, sent when the watch needs it. The answer's window
// (interval - askAfter) follows the answers' round trips: short while
// they come at once, so that the proofs come about once an interval, and
// up to a third of the interval when etcd answers late, so that a slow
// answer does not become a read.
//
// Asks and the checks of their answers fall on a grid of a sixteenth of
// the interval on the wall clock (an ask moved earlier onto it, the
// window a whole number of steps): at rest the cost of a message is
// mostly the wake-ups of the threads that carry it, and the asks of all
// the followers of a process, and the renewals reaching etcd from every
// host whose clock is in step, then wake them together, a few per step,
// instead of one wake-up per follower. Without a watch the follower
// reads once an interval. Only the follower's run loop touches it.
type resyncPlan struct {
	interval  time.Duration
	lastProof time.Time     // the last response of the watch
	lastRead  time.Time     // the last resync read
	asked     time.Time     // an unanswered ask for a proof; zero if none
	window    time.Duration // how long an ask may go unanswered; 0: the widest
	// every: read every so many intervals even while the watch proves
	// itself (readEvery or hostReadEvery); 0: never.
	every int
	// fails counts the reads in a row that failed while the watch was
	// established, and hold is when the next step may come after the
	// last of them (see readFailed).
	fails int
	hold  time.Time
	// early is how much sooner than askAfter the first ask after an
	// event comes (see event); 0 otherwise.
	early time.Duration
}

// event notes a watch response that carried events at now. A publish
// reaches every follower at once, and each then asks for its next proof
// at the same step of the grid, while etcd writes every follower's row:
// the asks came together, were answered late, and a late answer in the
// narrow window of a fleet at rest became a read, every follower's at
// once. So the next ask comes at a random step between a third of the
// interval and askAfter, and its window is the widest.
func (p *resyncPlan) event(now time.Time) {
	p.proved(now)
	p.window = p.widest()
	if spread := p.askAfter() - p.interval/3; spread > 0 {
		p.early = rand.N(spread)
	}
}

// readFailed notes a read that failed at now while the watch runs: the
// next ask waits one interval, doubling with each failure up to four,
// jittered. A watch that etcd stops answering in time (an overloaded
// member) led every follower to a read each interval, each one more of
// the load; a broken watch (the reconnect path) still reads each
// interval. It is outside the staleness contract: a worker that cannot
// read etcd in time is stale until it can.
func (p *resyncPlan) readFailed(now time.Time) {
	p.fails++
	d := p.interval << min(p.fails-1, 2)
	p.hold = now.Add(d/2 + rand.N(d/2+1))
}

// readOK notes a read that succeeded.
func (p *resyncPlan) readOK() { p.fails, p.hold = 0, time.Time{} }

// resyncStep is what the follower does when its resync timer fires.
type resyncStep int

const (
	stepNothing resyncStep = iota
	stepRead               // the resync read (and, if broken, a new watch)
	stepProve              // ask for a proof: a lease renewal or a progress request
)

// The answer's window: at least minWindow, at most maxWindow of the
// interval, and windowRTTs times the last ask's round trip in between,
// rounded up to the grid (a gridSteps-th of the interval).
const (
	minWindow  = 16 // a sixteenth of the interval
	maxWindow  = 3  // a third
	windowRTTs = 4
	gridSteps  = 16
)

// grid is the step that asks and their checks fall on.
func (p *resyncPlan) grid() time.Duration { return p.interval / gridSteps }

// askAt is when an unproven watch asks: askAfter its last proof, moved
// earlier onto the grid.
func (p *resyncPlan) askAt() time.Time {
	at := p.lastProof.Add(p.askAfter() - p.early)
	if g := p.grid(); g > 0 {
		at = at.Truncate(g)
	}
	return at
}

// askAfter is how long an unproven watch waits before it asks, and
// answerWithin how long the ask may go unanswered before a read: together
// one interval.
func (p *resyncPlan) askAfter() time.Duration { return p.interval - p.answerWithin() }

func (p *resyncPlan) answerWithin() time.Duration {
	if p.window == 0 {
		return p.widest()
	}
	return p.window
}

// next is the step due at now. watching: the watch is established. A
// stepRead is the caller's to note (read).
func (p *resyncPlan) next(now time.Time, watching bool) resyncStep {
	if !p.asked.IsZero() && p.lastProof.After(p.asked) {
		p.answered(p.lastProof.Sub(p.asked))
		p.asked = time.Time{}
	}
	switch {
	case !watching:
		p.asked = time.Time{}
		if !now.Before(p.lastRead.Add(p.interval)) {
			return stepRead
		}
	case now.Before(p.hold):
	case p.every > 0 && !now.Before(p.lastRead.Add(time.Duration(p.every)*p.interval)):
		return stepRead
	case !p.asked.IsZero() && !now.Before(p.asked.Add(p.answerWithin())):
		p.answered(p.interval) // unanswered: widest window next time
		return stepRead
	case p.asked.IsZero() && !now.Before(p.askAt()):
		p.asked, p.early = now, 0
		return stepProve
	}
	return stepNothing
}

// answered sets the window from the round trip of the last ask: it widens
// at once and narrows by an eighth per answer.
func (p *resyncPlan) answered(rtt time.Duration) {
	p.window = min(max(p.onGrid(windowRTTs*rtt, true), p.onGrid(p.answerWithin()*7/8, false), p.onGrid(p.interval/minWindow, true)), p.widest())
}

// widest is the widest window: a third of the interval, on the grid.
func (p *resyncPlan) widest() time.Duration { return p.onGrid(p.interval/maxWindow, false) }

// onGrid rounds d to a whole number of grid steps, up or down.
func (p *resyncPlan) onGrid(d time.Duration, up bool) time.Duration {
	g := p.grid()
	if g <= 0 {
		return d
	}
	if up {
		d += g - 1
	}
	return d / g * g
}

// read notes a resync read at now: it proves what a progress
// notification proves.
func (p *resyncPlan) read(now time.Time) {
	p.lastRead, p.asked = now, time.Time{}
	p.proved(now)
}

// proved notes a response of the watch at now.
func (p *resyncPlan) proved(now time.Time) {
	if now.After(p.lastProof) {
		p.lastProof = now
	}
}

// due is when the next step may be due.
func (p *resyncPlan) due(watching bool) time.Time {
	var d time.Time
	switch {
	case !watching:
		return p.lastRead.Add(p.interval)
	case p.asked.IsZero():
		d = p.askAt()
	default:
		d = p.asked.Add(p.answerWithin())
	}
	if p.every > 0 {
		d = earlier(d, p.lastRead.Add(time.Duration(p.every)*p.interval))
	}
	if d.Before(p.hold) {
		d = p.hold
	}
	return d
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
