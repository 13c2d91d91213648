package propagate

import "time"

// readEvery is how many resync intervals pass between two resync reads
// while the watch proves itself live by progress notifications: the read
// also finds this worker's row gone (deleted under a live lease), which
// the watch of the record does not see.
const readEvery = 10

// resyncPlan decides, every third of the resync interval (a tick), how
// the follower makes sure its watch missed nothing. A read of the
// record's version from every follower every interval was most of a
// fleet's cost at rest (1,000 linearizable reads a second for 1,000
// workers). Instead, while the watch runs, the follower asks etcd for a
// progress notification (one message on the watch's stream, no read):
// etcd answers once every event up to its current revision was delivered
// on the stream, which proves what a read finding nothing newer proves.
// A tick after a notification (anyone's: a shared client's stream
// broadcasts it to each watch) needs nothing; a tick after none asks; a
// tick after an unanswered request reads, as does every readEvery-th
// interval and every interval while the watch is broken. A version the
// watch lost is so found within one interval: a proof before it, a tick
// with nothing to do, a request, then a read, each a third apart.
// Only the follower's run loop touches it.
type resyncPlan struct {
	ticks     int       // ticks since the follower started
	asked     bool      // a progress request is outstanding
	lastTick  time.Time // the previous tick
	lastProof time.Time // the last progress notification
}

// resyncTicks is how many ticks make one resync interval.
const resyncTicks = 3

// resyncStep is what the follower does at a tick.
type resyncStep int

const (
	stepNothing  resyncStep = iota
	stepRead                // the resync read (and, if broken, a new watch)
	stepProgress            // a progress request on the watch's stream
)

// next is the step at a tick. watching: the watch is established.
func (p *resyncPlan) next(now time.Time, watching bool) resyncStep {
	p.ticks++
	proved := p.lastProof.After(p.lastTick)
	p.lastTick = now
	switch {
	case !watching:
		p.asked = false
		if p.ticks%resyncTicks == 0 {
			return stepRead
		}
		return stepNothing
	case p.ticks%(resyncTicks*readEvery) == 0:
		p.asked = false
		return stepRead
	case proved:
		p.asked = false
		return stepNothing
	case p.asked:
		p.asked = false
		return stepRead
	default:
		p.asked = true
		return stepProgress
	}
}

// proved records a progress notification.
func (p *resyncPlan) proved(now time.Time) { p.lastProof = now }
