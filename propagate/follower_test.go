package propagate

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

func fleetOf(t testing.TB, ch *Channel) Fleet {
	t.Helper()
	fl, err := ch.Fleet(context.Background())
	if err != nil {
		t.Fatalf("Fleet: %v", err)
	}
	return fl
}

func rowOf(fl Fleet, id string) (WorkerRow, bool) {
	for _, r := range fl.Workers {
		if r.ID == id {
			return r, true
		}
	}
	return WorkerRow{}, false
}

func TestPublishAllApply(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	var ws []*worker
	for _, id := range []string{"w0", "w1", "w2", "w3"} {
		ws = append(ws, startWorker(t, s.Endpoints(), p, id, workerOpts{}))
	}
	for _, w := range ws {
		if got := w.version(); got != 1 {
			t.Fatalf("%s starts at version %d, want 1", w.id, got)
		}
	}
	res := ws[2].reload(t, configYAML("gw", 2, "KEY1"))
	if res.Outcome != reconf.Published || res.Generation != 2 {
		t.Fatalf("publish: got %s/%s generation %d, want published generation 2", res.Outcome, res.Reason, res.Generation)
	}
	waitFor(t, 5*time.Second, "every worker applies version 2", converged(ws, 2))
	for _, w := range ws {
		if got := w.limit(); got != 2 {
			t.Errorf("%s: limit %d, want 2", w.id, got)
		}
		if got := w.rt.Current().Config().Backend.Key.Reveal(); got != canary {
			t.Errorf("%s: the secret was not resolved locally", w.id)
		}
	}
	waitFor(t, 5*time.Second, "the fleet reports converged", func() bool {
		fl := fleetOf(t, ws[0].ch)
		return fl.Converged && len(fl.Workers) == 4 && fl.ClusterVersion == 2
	})
	fl := fleetOf(t, ws[0].ch)
	for _, r := range fl.Workers {
		if r.State != StateOK || r.LastError != "" || r.BootstrapDrift {
			t.Errorf("row %+v: want state ok, no error, no drift", r)
		}
	}
	assertNoCanary(t, ws[0].cli)
}

func TestConcurrentPublishesOneOrder(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{})
	c := startWorker(t, s.Endpoints(), p, "c", workerOpts{})
	ws := []*worker{a, b, c}
	for round := range 6 {
		var wg sync.WaitGroup
		var ra, rb reconf.Result
		wg.Go(func() { ra = a.reload(t, configYAML("gw", 100+2*round, "KEY1")) })
		wg.Go(func() { rb = b.reload(t, configYAML("gw", 101+2*round, "KEY1")) })
		wg.Wait()
		won := 0
		for _, r := range []reconf.Result{ra, rb} {
			switch {
			case r.Outcome == reconf.Published:
				won++
			case r.Outcome == reconf.Busy && (r.Reason == reasons.Superseded || r.Reason == reconf.ReasonInFlight):
			default:
				t.Fatalf("round %d: got %s/%s (%s), want published or busy", round, r.Outcome, r.Reason, r.Message)
			}
		}
		if won == 0 {
			t.Fatalf("round %d: neither publish won", round)
		}
		if won == 2 && ra.Generation == rb.Generation {
			t.Fatalf("round %d: both published generation %d", round, ra.Generation)
		}
		u, _, err := a.ch.Latest(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "every worker ends on the cluster version", converged(ws, u.Version))
		want := ws[0].limit()
		for _, w := range ws {
			if w.limit() != want {
				t.Fatalf("round %d: %s has limit %d, %s has %d at the same version %d", round, w.id, w.limit(), ws[0].id, want, u.Version)
			}
		}
		if u.Record.Format != "json/1" || !strings.Contains(string(u.Record.Live), `"stub":`+itoa(want)) {
			t.Fatalf("round %d: workers hold limit %d, the cluster record says %q", round, want, u.Record.Live)
		}
	}
	for _, w := range ws {
		assertIncreasing(t, w)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// assertIncreasing checks that a worker's published generations only ever
// grew: no older version landed after a newer one.
func assertIncreasing(t testing.TB, w *worker) {
	t.Helper()
	gens := w.published()
	for i := 1; i < len(gens); i++ {
		if gens[i] <= gens[i-1] {
			t.Fatalf("%s published generation %d after %d: %v", w.id, gens[i], gens[i-1], gens)
		}
	}
}

func TestUnresolvedSecretKeepsGenerationThenCatchesUp(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	fast := []Option{WithBackoff(10*time.Millisecond, 200*time.Millisecond)}
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{follow: fast})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{follow: fast})
	cEnv := newEnv("KEY1", canary) // no KEY3
	c := startWorker(t, s.Endpoints(), p, "c", workerOpts{follow: fast, env: cEnv})
	a.env.Set("KEY3", canary+"-3")
	b.env.Set("KEY3", canary+"-3")

	if res := a.reload(t, configYAML("gw", 2, "KEY3")); res.Outcome != reconf.Published {
		t.Fatalf("publish: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 5*time.Second, "a and b apply version 2", converged([]*worker{a, b}, 2))
	waitFor(t, 5*time.Second, "c reports the failure in its row", func() bool {
		r, ok := rowOf(fleetOf(t, a.ch), "c")
		return ok && r.State == StateFailing && r.LastError == reconf.ReasonSecretUnresolved && r.AppliedVersion == 1
	})
	if c.version() != 1 || c.limit() != 1 || c.rt.Current().Config().Backend.Key.Reveal() != canary {
		t.Fatalf("c: version %d limit %d; want its generation 1 whole", c.version(), c.limit())
	}
	fl := fleetOf(t, a.ch)
	if fl.Converged {
		t.Fatalf("fleet converged with c on version 1: %+v", fl)
	}

	// A newer version that c still cannot resolve: it keeps failing.
	if res := a.reload(t, configYAML("gw", 3, "KEY3")); res.Outcome != reconf.Published {
		t.Fatalf("publish: %s/%s", res.Outcome, res.Reason)
	}
	waitFor(t, 5*time.Second, "a and b apply version 3", converged([]*worker{a, b}, 3))
	time.Sleep(300 * time.Millisecond)
	if c.version() != 1 {
		t.Fatalf("c moved to %d without its secret", c.version())
	}

	// The secret appears: c catches up by its own retries.
	cEnv.Set("KEY3", canary+"-3")
	waitFor(t, 2*time.Second, "c catches up", converged([]*worker{c}, 3))
	waitFor(t, 5*time.Second, "the fleet converges and c's row is ok", func() bool {
		fl := fleetOf(t, a.ch)
		r, _ := rowOf(fl, "c")
		return fl.Converged && r.State == StateOK && r.LastError == ""
	})
	assertIncreasing(t, c)
	assertNoCanary(t, a.cli)
}

// slowConsumer takes a while to prepare, so applies overlap new versions.
type slowConsumer struct{ d time.Duration }

func (s slowConsumer) Prepare(ctx context.Context, _, _ *testConfig) (reconf.Prepared, error) {
	select {
	case <-time.After(s.d):
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestApplyRacingNewerVersionNeverLandsOlder(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	pub := startWorker(t, s.Endpoints(), p, "pub", workerOpts{})
	slow := startWorker(t, s.Endpoints(), p, "slow", workerOpts{
		rtOpts: []reconf.Option{reconf.WithConsumer(reconf.Key[any]("slow"), slowConsumer{60 * time.Millisecond}, "limits")},
	})

	// Old records the spammer keeps offering, each tagged with its version.
	type old struct {
		v   uint64
		rec fleet.Record
	}
	var (
		mu   sync.Mutex
		olds []old
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			cands := append([]old(nil), olds...)
			mu.Unlock()
			for _, o := range cands {
				if o.v >= slow.version() {
					continue // not old yet
				}
				res, err := fleetSide(slow.rt).Apply(context.Background(), o.v, o.rec)
				if err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if res.Outcome == reconf.Published {
					t.Errorf("an old version %d was published over a newer one", o.v)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	for i := 2; i <= 12; i++ {
		res := pub.reload(t, configYAML("gw", i, "KEY1"))
		if res.Outcome != reconf.Published {
			t.Fatalf("publish %d: %s/%s", i, res.Outcome, res.Reason)
		}
		u, _, err := pub.ch.Latest(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		olds = append(olds, old{u.Version, u.Record})
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // publish faster than slow applies
	}
	waitFor(t, 10*time.Second, "slow ends on the newest version", converged([]*worker{slow}, 12))
	close(stop)
	wg.Wait()
	assertIncreasing(t, slow)
	if got := slow.published(); len(got) >= 11 {
		t.Logf("slow applied every version: %v (it was expected to skip some)", got)
	}
	// A stale version offered directly is a no-op.
	mu.Lock()
	first := olds[0]
	mu.Unlock()
	res, err := fleetSide(slow.rt).Apply(context.Background(), first.v, first.rec)
	if err != nil || res.Outcome != reconf.NoOp || res.Reason != reasons.Stale || slow.version() != 12 {
		t.Fatalf("stale apply: %s/%s err %v version %d; want no-op stale_version, version 12", res.Outcome, res.Reason, err, slow.version())
	}
}

func TestLateWorkerJoinsAtCurrentVersion(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	for i := 2; i <= 4; i++ {
		if res := a.reload(t, configYAML("gw", 10*i, "KEY1")); res.Outcome != reconf.Published {
			t.Fatalf("publish: %s/%s", res.Outcome, res.Reason)
		}
	}
	// The late worker's file still says limit 1; the cluster's version wins.
	late := startWorker(t, s.Endpoints(), p, "late", workerOpts{})
	if late.version() != 4 || late.limit() != 40 {
		t.Fatalf("late worker starts at version %d limit %d, want 4 and 40", late.version(), late.limit())
	}
	if res := late.reload(t, configYAML("gw", 50, "KEY1")); res.Outcome != reconf.Published || res.Generation != 5 {
		t.Fatalf("late publish: %s/%s generation %d, want published 5", res.Outcome, res.Reason, res.Generation)
	}
	waitFor(t, 5*time.Second, "a applies the late worker's version", converged([]*worker{a}, 5))
}

func TestRowsOfGoneWorkersDisappear(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	ttl := []Option{WithLeaseTTL(2 * time.Second)}
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{follow: ttl})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{follow: ttl})
	dead := startWorker(t, s.Endpoints(), p, "dead", workerOpts{follow: ttl})
	if n := len(fleetOf(t, a.ch).Workers); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	// A clean Close revokes the lease: the row goes at once.
	if err := b.f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := rowOf(fleetOf(t, a.ch), "b"); ok {
		t.Fatal("b's row is still there after Close")
	}
	// A worker that dies (its connection gone, no revoke) expires with
	// its lease.
	start := time.Now()
	_ = dead.cli.Close()
	waitFor(t, 2*time.Second+3*time.Second, "the dead worker's row expires", func() bool {
		_, ok := rowOf(fleetOf(t, a.ch), "dead")
		return !ok
	})
	t.Logf("dead worker's row expired after %v (TTL 2s)", time.Since(start).Round(10*time.Millisecond))
	fl := fleetOf(t, a.ch)
	if len(fl.Workers) != 1 || !fl.Converged {
		t.Fatalf("fleet %+v: want a alone, converged", fl)
	}
}

func TestUnreachableEtcdDegradesThenRecovers(t *testing.T) {
	c := startCluster(t, 1)
	p := newPrefix()
	opts := workerOpts{
		follow: []Option{WithResyncInterval(200 * time.Millisecond), WithBackoff(10*time.Millisecond, 200*time.Millisecond)},
		chOpts: []ChannelOption{WithRequestTimeout(300 * time.Millisecond)},
	}
	a := startWorker(t, c.Endpoints(), p, "a", opts)
	b := startWorker(t, c.Endpoints(), p, "b", opts)
	a.reload(t, configYAML("gw", 2, "KEY1"))
	waitFor(t, 5*time.Second, "converge on 2", converged([]*worker{a, b}, 2))

	c.Stop(0)
	waitFor(t, 5*time.Second, "workers report degraded", func() bool {
		return a.f.Row().State == StateDegraded && b.f.Row().State == StateDegraded
	})
	if r := b.f.Row(); r.LastError != reasons.ChannelUnreachable {
		t.Fatalf("row %+v: want last_error %s", r, reasons.ChannelUnreachable)
	}
	// Still serving the last-good generation; a publish fails cleanly.
	if b.version() != 2 || b.limit() != 2 {
		t.Fatalf("b: version %d limit %d, want 2 and 2", b.version(), b.limit())
	}
	res := a.reload(t, configYAML("gw", 3, "KEY1"))
	if res.Outcome.OK() || a.version() != 2 {
		t.Fatalf("publish without etcd: %s/%s version %d; want a failure, version 2", res.Outcome, res.Reason, a.version())
	}
	st := b.f.StatusFields()
	if st["cluster_reachable"] != false || st["converged"] != false || st["cluster_version"] != nil {
		t.Fatalf("status fields without etcd: %v", st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "workers recover", func() bool {
		return a.f.Row().State == StateOK && b.f.Row().State == StateOK
	})
	var r reconf.Result
	waitFor(t, 10*time.Second, "a publishes version 3", func() bool {
		r = a.reload(t, configYAML("gw", 3, "KEY1"))
		return r.Outcome == reconf.Published || a.version() == 3
	})
	waitFor(t, 5*time.Second, "converge on 3", converged([]*worker{a, b}, 3))
	waitFor(t, 5*time.Second, "rows back", func() bool {
		fl := fleetOf(t, a.ch)
		return fl.Converged && len(fl.Workers) == 2
	})
	assertIncreasing(t, a)
	assertIncreasing(t, b)
}

func TestStatusFieldsAndStaleness(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	var ws []*worker
	for _, id := range []string{"w0", "w1", "w2", "w3"} {
		ws = append(ws, startWorker(t, s.Endpoints(), p, id, workerOpts{}))
	}
	bound := ws[0].f.StalenessBound()
	if bound != DefaultResyncInterval+DefaultMaxBackoff {
		t.Fatalf("bound %v", bound)
	}
	var worst time.Duration
	for i := 2; i <= 6; i++ {
		res := ws[i%4].reload(t, configYAML("gw", i, "KEY1"))
		if res.Outcome != reconf.Published {
			t.Fatalf("publish: %s/%s", res.Outcome, res.Reason)
		}
		published := time.Now()
		waitFor(t, bound, "every worker applies within the staleness bound", converged(ws, uint64(i)))
		worst = max(worst, time.Since(published))
	}
	t.Logf("worst publish -> applied on all 4 workers: %v (bound %v)", worst, bound)

	st := ws[1].f.StatusFields()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ClusterVersion *uint64     `json:"cluster_version"`
		Workers        []WorkerRow `json:"workers"`
		Converged      bool        `json:"converged"`
		Worker         WorkerRow   `json:"worker"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ClusterVersion == nil || *doc.ClusterVersion != 6 || len(doc.Workers) != 4 || doc.Worker.ID != "w1" {
		t.Fatalf("status fields %s", b)
	}
	waitFor(t, 3*time.Second, "status converged", func() bool { return ws[1].f.StatusFields()["converged"] == true })
	if strings.Contains(string(b), canary) {
		t.Fatal("the canary is in the status fields")
	}
}

func TestResyncAloneMeetsTheBound(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	deaf := startWorker(t, s.Endpoints(), p, "deaf", workerOpts{follow: []Option{withoutWatch(), WithResyncInterval(300 * time.Millisecond)}})
	bound := deaf.f.StalenessBound()
	for i := 2; i <= 4; i++ {
		a.reload(t, configYAML("gw", i, "KEY1"))
		waitFor(t, bound, "the resync alone applies within the bound", converged([]*worker{deaf}, uint64(i)))
	}
}

func TestMalformedRecordIsReportedAndReplaced(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{follow: []Option{WithResyncInterval(100 * time.Millisecond)}})
	ctx := context.Background()
	if _, err := a.cli.Put(ctx, a.ch.Key(), "not json"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a reports record_malformed", func() bool {
		r := a.f.Row()
		return r.State == StateFailing && r.LastError == reasons.RecordMalformed
	})
	if a.version() != 1 {
		t.Fatalf("a moved to %d", a.version())
	}
	if _, _, err := a.ch.Latest(ctx); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Latest: %v, want ErrMalformed", err)
	}
	// A worker holding 1 publishes over the hand-written version 2: a
	// record nobody applies does not block publishing.
	if res := a.reload(t, configYAML("gw", 7, "KEY1")); res.Outcome != reconf.Published || res.Generation != 3 {
		t.Fatalf("publish over a malformed version: %s/%s generation %d", res.Outcome, res.Reason, res.Generation)
	}
	waitFor(t, 3*time.Second, "a holds version 3", converged([]*worker{a}, 3))
	if a.limit() != 7 {
		t.Fatalf("limit %d", a.limit())
	}
	waitFor(t, 3*time.Second, "the row is ok again", func() bool { return a.f.Row().State == StateOK })
}

func TestJoinAndPublishCAS(t *testing.T) {
	s := startServer(t)
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	p := newPrefix()
	var chs []*Channel
	for _, id := range []string{"x", "y", "z", "w"} {
		ch, err := NewChannel(cli, p, WithWorkerID(id))
		if err != nil {
			t.Fatal(err)
		}
		chs = append(chs, ch)
	}
	// Concurrent joins of an empty channel agree on one version 1.
	recs := make([]fleet.Record, len(chs))
	vs := make([]uint64, len(chs))
	var wg sync.WaitGroup
	for i, ch := range chs {
		wg.Go(func() {
			v, r, err := ch.Join(ctx, fleet.Record{Live: []byte("limits: {stub: " + itoa(i) + "}\n"), Fingerprint: "fp"})
			if err != nil {
				t.Error(err)
			}
			vs[i], recs[i] = v, r
		})
	}
	wg.Wait()
	for i := range chs {
		if vs[i] != 1 || string(recs[i].Live) != string(recs[0].Live) {
			t.Fatalf("join %d: version %d live %q; want 1 and %q", i, vs[i], recs[i].Live, recs[0].Live)
		}
	}
	// Each publisher has a presence row, as a Follower keeps.
	for _, ch := range chs {
		if _, err := cli.Put(ctx, ch.rowKey(), "{}"); err != nil {
			t.Fatal(err)
		}
	}
	// Concurrent publishes on version 1: exactly one wins, as version 2.
	wins := make([]bool, len(chs))
	for i, ch := range chs {
		wg.Go(func() {
			v, err := ch.Publish(ctx, 1, fleet.Record{Live: []byte("limits: {stub: 9}\n")})
			var e *reconf.Error
			switch {
			case err == nil && v == 2:
				wins[i] = true
			case errors.As(err, &e) && e.Reason == reasons.Superseded:
			default:
				t.Errorf("publish %d: %d %v", i, v, err)
			}
		})
	}
	wg.Wait()
	n := 0
	for _, w := range wins {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d publishes won version 2, want 1", n)
	}
	u, _, err := chs[0].Latest(ctx)
	if err != nil || u.Version != 2 || u.PublishedBy == "" || u.PublishedAt.IsZero() {
		t.Fatalf("Latest: %+v %v", u, err)
	}
	// The stored value is the documented JSON record.
	resp, err := cli.Get(ctx, chs[0].Key())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "published_by", "published_at", "bootstrap_fingerprint", "live"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("the record has no %q: %s", k, resp.Kvs[0].Value)
		}
	}
	if _, err := cli.Get(ctx, "x", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// TestLiteralSecretNeverReachesEtcd: a literal secret cannot be published,
// and no flow stores the canary (the value every worker's references
// resolve to) in etcd.
func TestLiteralSecretNeverReachesEtcd(t *testing.T) {
	s := startServer(t)
	p := newPrefix()
	a := startWorker(t, s.Endpoints(), p, "a", workerOpts{})
	b := startWorker(t, s.Endpoints(), p, "b", workerOpts{})
	literal := strings.Replace(configYAML("gw", 9, "KEY1"), "${env:KEY1}", canary, 1)
	res := a.reload(t, literal)
	if res.Outcome != reconf.Invalid || res.Reason != reasons.SecretNotPropagate {
		t.Fatalf("literal secret: %s/%s, want invalid secret_not_propagatable", res.Outcome, res.Reason)
	}
	if strings.Contains(res.Message, canary) {
		t.Fatal("the canary is in the result message")
	}
	if a.version() != 1 || b.version() != 1 {
		t.Fatalf("versions %d %d after a refused publish", a.version(), b.version())
	}
	a.reload(t, configYAML("gw", 9, "KEY2"))
	waitFor(t, 5*time.Second, "converge", converged([]*worker{a, b}, 2))
	assertNoCanary(t, a.cli)
}

// TestRecordTooLargeHasItsOwnReason: a record over the cluster's request
// limit is refused as record_too_large, never cluster_unavailable: on an
// external cluster with etcd's default --max-request-bytes (1.5 MiB, in
// etcd's check and, 512 KiB higher, in its gRPC limit), and over the 8 MiB
// the client sends to the embedded member.
func TestRecordTooLargeHasItsOwnReason(t *testing.T) {
	ext := startDefaultLimits(t)
	emb := startServer(t)
	for _, tc := range []struct {
		name      string
		endpoints []string
		size      int
	}{
		{"over etcd's request limit", ext, 1700 << 10},
		{"over etcd's gRPC limit", ext, 2200 << 10},
		{"over the client's send limit", emb.Endpoints(), 9 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := channelOn(t, tc.endpoints)
			ctx := context.Background()
			if _, _, err := ch.Join(ctx, fleet.Record{Live: []byte(`{"limits":{"stub":1}}`), Format: "json/1"}); err != nil {
				t.Fatal(err)
			}
			big := fleet.Record{Live: []byte(`{"limits":{"` + strings.Repeat("x", tc.size) + `":1}}`), Format: "json/1"}
			_, err := ch.Publish(ctx, 1, big)
			var e *reconf.Error
			if !errors.As(err, &e) || e.Reason != reasons.RecordTooLarge || errors.Is(err, ErrUnreachable) {
				t.Fatalf("publish: got %v, want reason %s", err, reasons.RecordTooLarge)
			}
			// A join sends the local record only to seed an empty channel.
			if v, _, err := ch.Join(ctx, big); err != nil || v != 1 {
				t.Fatalf("join of the existing channel: version %d, %v; want 1", v, err)
			}
			if u, _, err := ch.Latest(ctx); err != nil || u.Version != 1 {
				t.Fatalf("after the refusal: version %d, %v; want 1", u.Version, err)
			}
			empty := channelOn(t, tc.endpoints)
			if _, _, err := empty.Join(ctx, big); !errors.As(err, &e) || e.Reason != reasons.RecordTooLarge {
				t.Fatalf("seeding join: got %v, want reason %s", err, reasons.RecordTooLarge)
			}
		})
	}
}

// grantCounter counts the leases a client grants (a wrapper of the real
// one, for the test below).
type grantCounter struct {
	clientv3.Lease
	n atomic.Int32
}

func (g *grantCounter) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	g.n.Add(1)
	return g.Lease.Grant(ctx, ttl)
}

// Only the join that seeds an empty channel takes a lease (for the row it
// writes with version 1); a join of an existing channel reads the key and
// writes nothing. It used to grant a lease, fail its transaction and
// revoke the lease: three writes on etcd's leader per worker of a
// fleet's start-up.
func TestJoinExistingChannelWritesNothing(t *testing.T) {
	s := startServer(t)
	cli, err := Connect(s.Endpoints(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	grants := &grantCounter{Lease: cli.Lease}
	cli.Lease = grants
	p := newPrefix()
	ctx := context.Background()
	rec := fleet.Record{Live: []byte(`{"limits":{"stub":1}}`), Format: "json/1"}
	for i, id := range []string{"first", "second", "third"} {
		ch, err := NewChannel(cli, p, WithWorkerID(id))
		if err != nil {
			t.Fatal(err)
		}
		rev := revisionOf(t, cli)
		v, got, err := ch.Join(ctx, rec)
		if err != nil || v != 1 || string(got.Live) != string(rec.Live) {
			t.Fatalf("join %d: version %d, %q, %v; want 1", i, v, got.Live, err)
		}
		if i == 0 {
			continue
		}
		if n := grants.n.Load(); n != 1 {
			t.Errorf("join %d: %d leases granted in all, want 1 (the seeding join's)", i, n)
		}
		if r := revisionOf(t, cli); r != rev {
			t.Errorf("join %d moved the revision from %d to %d", i, rev, r)
		}
	}
}

// revisionOf returns the cluster's current revision.
func revisionOf(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// channelOn returns a channel with a fresh prefix on its own client,
// closed when the test ends.
func channelOn(t *testing.T, endpoints []string) *Channel {
	t.Helper()
	cli, err := Connect(endpoints, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ch, err := NewChannel(cli, newPrefix())
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// startDefaultLimits runs an etcd member with etcd's own default request
// limits, as an external cluster has them (the embedded member raises
// them to 8 MiB).
func startDefaultLimits(t *testing.T) []string {
	t.Helper()
	var urls []url.URL
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, url.URL{Scheme: "http", Host: l.Addr().String()})
		l.Close()
	}
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = urls[:1], urls[:1]
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = urls[1:], urls[1:]
	cfg.InitialCluster = cfg.Name + "=" + urls[1].String()
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"/dev/null"} // its shutdown noise
	if cfg.MaxRequestBytes != 1536*1024 {
		t.Fatalf("etcd's default request limit is %d, not 1.5 MiB", cfg.MaxRequestBytes)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd did not start")
	}
	return []string{urls[0].String()}
}

// TestResyncReadsTheRecordOnlyWhenNewer: the periodic resync of a
// follower that holds the newest version reads the key's version alone,
// so a fleet's steady state does not move whole configurations.
func TestResyncReadsTheRecordOnlyWhenNewer(t *testing.T) {
	ch := channelOn(t, startServer(t).Endpoints())
	ctx := context.Background()
	if u, _, _, _, err := ch.latestAfter(ctx, 0, ""); err != nil || u.Version != 0 {
		t.Fatalf("empty channel: %+v %v", u, err)
	}
	rec := fleet.Record{Live: []byte(`{"limits":{"stub":1}}`), Format: "json/1", Fingerprint: "fp"}
	if _, _, err := ch.Join(ctx, rec); err != nil {
		t.Fatal(err)
	}
	u, _, _, _, err := ch.latestAfter(ctx, 0, "")
	if err != nil || u.Version != 1 || string(u.Record.Live) != string(rec.Live) || u.Record.Format != "json/1" {
		t.Fatalf("newer version: got %+v %v, want version 1 with its record", u, err)
	}
	u, _, _, _, err = ch.latestAfter(ctx, 1, "")
	if err != nil || u.Version != 1 || u.Record.Live != nil || u.PublishedBy != "" {
		t.Fatalf("held version: got %+v %v, want version 1 without its record", u, err)
	}
}
