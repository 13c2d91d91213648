package propagate

import "time"

// readEvery is how many resync intervals pass between two resync reads
// while the watch proves itself live: the read also finds this worker's
// row or its host's record gone (deleted under a live lease, or lapsed
// with another worker's lease), which the watch of the record does not
// see. With the default interval it is one read every 10 seconds.
const readEvery = 5

// resyncPlan decides when the follower makes sure its watch missed
// nothing. A read of the record's version from every follower every
// interval was most of a fleet's cost at rest (1,000 linearizable reads a
// second for 1,000 workers), and so, after it, was a progress request
// from every follower every two thirds of a second. Instead the watch
// asks etcd for progress notifications (WithProgressNotify): a member
// sends one on each such watch every --watch-progress-notify-interval
// (the embedded member: every second), and only once every event up to
// its current revision was delivered on the stream, which proves what a
// read finding nothing newer proves. Any response of the watch, an event
// or a notification, is such a proof of the moment it arrives. So is the
// answer to a lease renewal that carries a store revision the watch has
// already reached (WithLeaseAnswers): nothing was written since, so
// nothing was missed. At rest the renewals, which the lease needs anyway,
// are the proofs, and the member sends a notification only every five
// seconds, for a watch whose store changed under other keys.
//
// While proofs keep coming the follower sets no timer but the one for
// the periodic read. A watch silent for two thirds of an interval (an
// external cluster that sends no notifications, a stalled stream) gets a
// progress request (one message on the watch's stream, no read); one
// still silent a third of an interval later is read. A version the watch
// lost after its last proof is so found within one interval of that
// proof. Without a watch the follower reads once an interval.
// Only the follower's run loop touches it.
type resyncPlan struct {
	interval  time.Duration
	lastProof time.Time // the last response of the watch
	lastRead  time.Time // the last resync read
	asked     time.Time // an unanswered progress request; zero if none
}

// resyncStep is what the follower does when its resync timer fires.
type resyncStep int

const (
	stepNothing  resyncStep = iota
	stepRead                // the resync read (and, if broken, a new watch)
	stepProgress            // a progress request on the watch's stream
)

// askAfter is how long a silent watch waits before a progress request,
// and answerWithin how long the request may go unanswered before a read:
// together one interval.
func (p *resyncPlan) askAfter() time.Duration     { return p.interval * 2 / 3 }
func (p *resyncPlan) answerWithin() time.Duration { return p.interval - p.askAfter() }

// next is the step due at now. watching: the watch is established. A
// stepRead is the caller's to note (read).
func (p *resyncPlan) next(now time.Time, watching bool) resyncStep {
	if !p.asked.IsZero() && p.lastProof.After(p.asked) {
		p.asked = time.Time{} // answered
	}
	switch {
	case !watching:
		p.asked = time.Time{}
		if !now.Before(p.lastRead.Add(p.interval)) {
			return stepRead
		}
	case !now.Before(p.lastRead.Add(readEvery * p.interval)):
		return stepRead
	case !p.asked.IsZero() && !now.Before(p.asked.Add(p.answerWithin())):
		return stepRead
	case p.asked.IsZero() && !now.Before(p.lastProof.Add(p.askAfter())):
		p.asked = now
		return stepProgress
	}
	return stepNothing
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
	switch {
	case !watching:
		return p.lastRead.Add(p.interval)
	case p.asked.IsZero():
		return earlier(p.lastRead.Add(readEvery*p.interval), p.lastProof.Add(p.askAfter()))
	default:
		return earlier(p.lastRead.Add(readEvery*p.interval), p.asked.Add(p.answerWithin()))
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
