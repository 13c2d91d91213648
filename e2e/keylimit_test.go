//go:build unix

package e2e

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/testkit/keyload"
)

// ballast holds idle connections on every worker of hot's process but
// hot (see keyload.Ballast); they close with the test.
func ballast(t *testing.T, hot keyload.Target, workers, n int) {
	t.Helper()
	held, closeAll := keyload.Ballast(hot, workers, n)
	t.Cleanup(closeAll)
	full := 0
	for _, c := range held {
		if c >= n {
			full++
		}
	}
	if full < workers-1 {
		t.Logf("ballast: only %v connections held", held)
	}
}

// keyDrive drives key a at rate a second for dur over targets, killing
// a worker by kill (if set) at killAt.
func keyDrive(targets []keyload.Target, rate int, dur, killAt time.Duration, kill func() keyload.Target) []keyload.Try {
	return keyload.Drive(keyload.Load{Targets: targets, Rate: float64(rate), Dur: dur, Key: "secret-of-key-a",
		Body: chatBody("stub-1", false), KillAt: killAt, Kill: kill})
}

// keyVerdict logs a run's figures and checks them: from judgeFrom after
// the start to one second before the end, no window above hi
// admissions, none that ended at a refusal below lo (below loKill if it
// meets the second after killAt, when a worker was killed then), and
// every refusal a 429 with Retry-After. A refusal whose window, or the
// one before, held a stall in sending is not judged (see
// keyload.Windows), and when fewer than a tenth are the floor is not.
func keyVerdict(t *testing.T, tries []keyload.Try, rate int, dur, per, judgeFrom, killAt time.Duration, lo, loKill, hi int) {
	t.Helper()
	if len(tries) == 0 {
		t.Fatal("no requests were sent")
	}
	start := tries[0].Sent
	for _, tr := range tries {
		if tr.Sent.Before(start) {
			start = tr.Sent
		}
	}
	var admitted, refused, noRetryAfter, other int
	byWorker := map[string]int{}
	perSecond := make([]int, int(dur/time.Second)+2)
	for _, tr := range tries {
		byWorker[tr.Worker]++
		switch tr.Status {
		case 200:
			admitted++
			if i := int(tr.Answered.Sub(start) / time.Second); i < len(perSecond) {
				perSecond[i]++
			}
		case 429:
			refused++
			if !tr.RetryAfter {
				noRetryAfter++
			}
		default:
			other++
		}
	}
	if n := len(tries); n < rate*int(dur/time.Second)*8/10 {
		t.Skipf("this machine sent %d requests in %v, too few to judge the limit", n, dur)
	}
	var kill time.Time
	if killAt > 0 {
		kill = start.Add(killAt)
	}
	b := keyload.Windows(tries, per, start.Add(judgeFrom), start.Add(dur-time.Second), kill)
	refusedAt, atKill, surely := b.Refused, b.AtKill, b.Surely
	t.Logf("sent %d, admitted %d, refused %d (without Retry-After %d), other %d; admitted per second %v; asked by worker %v", len(tries), admitted, refused, noRetryAfter, other, perSecond, byWorker)
	t.Logf("windows of %v from %v: at most %d admitted (want %d at most); a window ending at a refusal held at most %d (want %d at least), %d by the kill (want %d at least); refusals judged %d, not judged for a stall %d",
		per, judgeFrom, surely, hi, refusedAt, lo, atKill, loKill, b.Judged, b.Stalled)
	if surely > hi {
		t.Errorf("a window of %v admitted at least %d; want at most %d", per, surely, hi)
	}
	if all := b.Judged + b.Stalled; b.Judged*10 < all {
		// The floor would be judged on a few refusals picked by where the
		// machine did not stall: too few to speak for the run.
		t.Skipf("this machine stalled in the windows of %d of %d refusals, too many to judge the floor", b.Stalled, all)
	}
	if refusedAt >= 0 && refusedAt < lo {
		t.Errorf("a window of %v ending at a refusal (sent at %v) admitted at most %d; want at least %d", per, judgeFrom+b.RefusedAt, refusedAt, lo)
	}
	if atKill >= 0 && atKill < loKill {
		t.Errorf("a window of %v by the kill ending at a refusal admitted at most %d; want at least %d", per, atKill, loKill)
	}
	if noRetryAfter != 0 {
		t.Errorf("%d refusals without Retry-After", noRetryAfter)
	}
}

// hotTargets is 15 drivers, 12 of them (80%) on hot's worker, the rest
// on the others in turn.
func hotTargets(hot keyload.Target, rest []keyload.Target) []keyload.Target {
	ts := make([]keyload.Target, 0, 15)
	for range 12 {
		ts = append(ts, hot)
	}
	for i := range 3 {
		ts = append(ts, rest[i%len(rest)])
	}
	return ts
}

// TestKeyLimitHoldsAcrossWorkers is the per-second form of the fleet key
// limit: a key limited to 100 requests a second, driven at 300 a second
// for 15 s on serve --workers 4 with 80% of the load on worker 1's
// connections, and worker 2 killed (SIGKILL) mid-run. From the third
// second on no sliding second admits more than 110 and none that ends
// at a refusal admits fewer than keyLimitLow, or keyLimitLowAtKill by
// the kill (the client sees a request's admission only between sending
// and the answer; see keyload.Windows), and every refusal is a 429 with
// Retry-After.
func TestKeyLimitHoldsAcrossWorkers(t *testing.T) {
	requireBinary(t)
	if testing.Short() {
		t.Skip("drives 15 s of load")
	}
	s := startServer(t, keysFleetConfig(true, false, ", limits: {requests: 100, per: 1s}"), []string{"--workers", "4", "--management-address", "127.0.0.1:0"}, keyEnv...)
	f := s.waitConverged(1, 4, 20*time.Second)
	pids := map[string]int{}
	for _, r := range f.Workers {
		pids[r.slot()] = r.PID
	}
	const rate, dur = 300, 15 * time.Second
	ballast(t, keyload.Target{URL: s.url, Slot: "1"}, 4, 12)
	at := func(slot string) keyload.Target { return keyload.Target{URL: s.url, Slot: slot} }
	tries := keyDrive(hotTargets(at("1"), []keyload.Target{at("2"), at("3"), at("4")}), rate, dur, dur/2, func() keyload.Target {
		if err := syscall.Kill(pids["2"], syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		return at("2")
	})
	keyVerdict(t, tries, rate, dur, time.Second, 2*time.Second, dur/2, keyLimitLow, keyLimitLowAtKill, 110)
}

// keyLimitLow is the fewest admissions the second that ends at a
// refusal may hold in CI, and keyLimitLowAtKill when it meets the one
// after a worker is killed: quiet runs held 96 and more, and 93 and more
// by a kill. Room is left for a loaded machine: the supervisor's new
// worker takes CPU from the others, shares regrow behind their fence,
// and after a short stall the loaded worker refills at its pace while a
// lightly loaded one refuses on its full share. A static quarter of the
// limit per worker holds 85, and 65 after a kill.
const (
	keyLimitLow       = 90
	keyLimitLowAtKill = 75
)

// keyLimitLowAtKillHosts is keyLimitLowAtKill across two hosts, whose
// workers learn of the kill from the other host's supervisor through the
// external etcd: judged on windows ending at refusals, a run at a load of
// 9 held 88 in the second by the kill. It still fails a static quarter
// (65), and over a 60 s window a dip of 30 is within its 570-630.
const keyLimitLowAtKillHosts = 70

// TestKeyLimitHoldsAcrossHosts runs the fleet key limit on two hosts of
// two workers each (two serve --workers 2 processes on one etcd): a key
// limited to 100 requests a second, 80% of the load on the first host's
// first worker, and the second host's second worker killed (SIGKILL)
// mid-run. In CI it runs for 6 s; RECONF_E2E_KEYLIMIT_FULL=1 runs it for
// 15 s.
func TestKeyLimitHoldsAcrossHosts(t *testing.T) {
	requireBinary(t)
	if testing.Short() {
		t.Skip("drives load on two hosts")
	}
	full := os.Getenv("RECONF_E2E_KEYLIMIT_FULL") == "1"
	etcd := startEtcdProcess(t)
	ep := tcpForward(t, etcd.Endpoint())
	const token = "keylimit-e2e-management-token-0123"
	var hosts []*server
	for range 2 {
		hosts = append(hosts, startServer(t, keysFleetConfig(true, false, ", limits: {requests: 100, per: 1s}"),
			[]string{"--workers", "2", "--management-address", "127.0.0.1:0", "--cluster", ep, "--cluster-prefix", "/test/keylimit-hosts"},
			append([]string{"RECONF_MANAGEMENT_TOKEN=" + token}, keyEnv...)...))
	}
	a, b := hosts[0], hosts[1]
	waitFleet(t, a, token, 1, 4)
	targets := hotTargets(keyload.Target{URL: a.url, Slot: "1"}, []keyload.Target{{URL: a.url, Slot: "2"}, {URL: b.url, Slot: "1"}, {URL: b.url, Slot: "2"}})
	ballast(t, targets[0], 2, 12)
	const rate = 300
	// The kill comes three quarters in, so that the refusals from the
	// judged start to the kill are judged on the fleet's own floor and
	// not only on the floor by the kill.
	dur, killAt := 6*time.Second, 4500*time.Millisecond
	if full {
		dur, killAt = 15*time.Second, 7500*time.Millisecond
	}
	// The pid is found before the run: the kill, from the driver's
	// goroutine, must not wait on the worker it kills.
	pid, err := keyload.SlotPID(b.url, "2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tries := keyDrive(targets, rate, dur, killAt, func() keyload.Target {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		return keyload.Target{URL: b.url, Slot: "2"}
	})
	keyVerdict(t, tries, rate, dur, time.Second, 2*time.Second, killAt, keyLimitLow, keyLimitLowAtKillHosts, 110)
}
