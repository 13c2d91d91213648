package propagate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// DefaultRequestTimeout bounds each etcd request a Channel or Follower
// makes, so that an unreachable etcd is noticed rather than waited on.
const DefaultRequestTimeout = 3 * time.Second

// Channel is a cluster channel on etcd: one key holds the cluster's current
// record, and that key's own version counter is the cluster version.
// Publish is a compare-and-set on it, so versions are dense (held+1) and
// totally ordered. The key is never deleted (deleting it would reset the
// counter). Worker rows live under the same prefix (see Follower).
//
// A Channel is safe for concurrent use. It does not own the client.
type Channel struct {
	cli     *clientv3.Client
	prefix  string
	id      string
	worker  string // slot in the fleet, for Publisher
	fleet   string // the fleet's ID, for Publisher
	host    string
	pid     int
	timeout time.Duration
	now     func() time.Time
	// appPrefixes are the application's prefixes a refusal names
	// (WithGrantPrefixes).
	appPrefixes []string

	joinLease   atomic.Int64             // the lease of the row Join wrote; a Follower takes it over
	ownRev      atomic.Int64             // the revision of this worker's last write of the record, which vet trusts
	writing     atomic.Pointer[ownWrite] // the record this worker's publish is writing, which vet trusts too
	unvetted    atomic.Uint64            // a version vet accepted unchecked (compacted, no worker left to tell); the Follower logs it
	noWitness   atomic.Bool              // etcd refused this worker's user the witness: records go without it (see writeRecord)
	unwitnessed atomic.Bool              // noWitness was just set; the Follower logs it
	hostsDenied atomic.Bool              // etcd refused the host records (hosts.go): rows alone
	timing      *Timing                  // WithTiming; nil: none
	noCopies    atomic.Bool              // etcd refused this worker's user the records' copies (see writeRecord)

	rowLease atomic.Int64                // the lease of this worker's row as last written; the driver key and counts live on it
	seen     atomic.Pointer[seenRollout] // the newest rollout state read or written, which a decision is compared with
	driving  atomic.Uint64               // the rollout this worker drives (holds the driver key of), or 0
	midJoin  atomic.Pointer[midJoin]     // Join started this worker on a rollout's active version; a Follower waits to follow it
	unheard  atomic.Int64                // the last moment a Follower's rollout loop found the channel out of reach (unix ns), or 0
	// rolloutWake wakes a Follower's rollout loop, which sleeps while
	// this worker follows no rollout (see Channel.wakeRollout).
	rolloutWake chan struct{}
}

var _ fleet.Channel = (*Channel)(nil)

// Option returns the reconf.Option that makes a runtime one worker of
// the cluster c: reconf.New joins at the cluster's current version
// (publishing the local load as version 1 when c is empty), every
// publish is a compare-and-set on c, generation IDs are cluster
// versions, and literal secrets are refused because only references
// travel. Follow then applies the versions other workers publish.
func (c *Channel) Option() reconf.Option { return fleet.WithChannel(c).(reconf.Option) }

// A runtime asks a channel with this method for its version before it
// answers no-op (see fleet.Channel); the signature must stay as it is.
var _ interface {
	Version(ctx context.Context) (uint64, error)
} = (*Channel)(nil)

// ChannelOption configures a Channel.
type ChannelOption func(*Channel)

// WithWorkerID names this worker in published records and in its worker
// row. It must be non-empty and contain no '/'. The default is
// host-pid-random.
func WithWorkerID(id string) ChannelOption { return func(c *Channel) { c.id = id } }

// WithHost names the host this worker runs on, in place of
// os.Hostname, in the records it publishes, its row and its host's
// record (see HostRow): a worker in a container whose host name is the
// container's reports the machine's. Every worker of one host must give
// the same name, and it must not be empty.
func WithHost(host string) ChannelOption {
	return func(c *Channel) {
		if host != "" {
			c.host = host
		}
	}
}

// WithFleet names, in every record this worker publishes and in its row,
// the fleet it belongs to (its supervisor's ID) and its slot there. Both
// are labels, not credentials; either may be empty.
func WithFleet(fleet, worker string) ChannelOption {
	return func(c *Channel) { c.fleet, c.worker = fleet, worker }
}

// WithRequestTimeout bounds each etcd request (default
// DefaultRequestTimeout); a caller's earlier deadline still wins.
func WithRequestTimeout(d time.Duration) ChannelOption {
	return func(c *Channel) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// NewChannel returns the channel of the cluster whose keys live under
// prefix (for example "/reconf/gateway"). Every worker of one cluster uses
// the same prefix and client endpoints. It makes no request.
func NewChannel(cli *clientv3.Client, prefix string, opts ...ChannelOption) (*Channel, error) {
	prefix = strings.TrimRight(prefix, "/")
	if cli == nil || prefix == "" {
		return nil, errors.New("propagate: a client and a non-empty key prefix are required")
	}
	c := &Channel{cli: cli, prefix: prefix, timeout: DefaultRequestTimeout, now: time.Now, pid: os.Getpid(), rolloutWake: make(chan struct{}, 1)}
	c.host, _ = os.Hostname()
	for _, o := range opts {
		o(c)
	}
	if c.id == "" {
		c.id = defaultWorkerID(c.host)
	}
	if strings.Contains(c.id, "/") {
		return nil, fmt.Errorf("propagate: worker ID %q contains '/'", c.id)
	}
	return c, nil
}

func defaultWorkerID(host string) string {
	if host == "" {
		host = "host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", strings.ReplaceAll(host, "/", "_"), os.Getpid(), hex.EncodeToString(b[:]))
}

// ID returns this worker's ID.
func (c *Channel) ID() string { return c.id }

// Publisher returns the identity this worker's records carry.
func (c *Channel) Publisher() Publisher {
	return Publisher{ID: c.id, Host: c.host, PID: c.pid, Worker: c.worker, Fleet: c.fleet}
}

// Key returns the etcd key that holds the record.
func (c *Channel) Key() string { return recordKey(c.prefix) }

// recordKey is the record's key under prefix.
func recordKey(prefix string) string { return prefix + "/config" }

// WorkersPrefix returns the etcd prefix of the worker rows.
func (c *Channel) WorkersPrefix() string { return c.prefix + "/workers/" }

func (c *Channel) rowKey() string { return c.WorkersPrefix() + c.id }

// rowPresent is the condition every publish carries: the publisher's own
// row exists at the revision it writes, which is what a follower vets.
func (c *Channel) rowPresent() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(c.rowKey()), ">", 0)
}

func (c *Channel) errNoRow() error {
	return fmt.Errorf("%w: publish: this worker's presence row %s is missing (its lease expired while etcd was away, or it does not follow the channel); followers would refuse the version, so it is not written",
		ErrUnreachable, c.rowKey())
}

func (c *Channel) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// Join implements fleet.Channel: it returns the cluster's current version
// and record, or, when the key does not exist, creates it with local as
// version 1 (a transaction on the key's create revision, so two workers
// joining an empty channel agree on one version 1). The transaction that
// creates version 1 also writes this worker's row under a lease of
// DefaultLeaseTTL, so that the record's publisher is present at the
// record's revision like every other publisher's; the Follower takes the
// row over. An existing record is vetted like every version a Follower
// sees (see Follower): one of an unknown publisher or a newer format is
// refused with an error, and the worker does not start on it.
//
// The key is read first: when it exists (every join but a fleet's first)
// the join costs one read, not a lease granted and revoked around a failed
// transaction, three writes on etcd's leader per worker in a fleet's
// start-up storm.
func (c *Channel) Join(ctx context.Context, local fleet.Record) (uint64, fleet.Record, error) {
	var got []*mvccpb.KeyValue
	err := c.retryLate(ctx, func(rctx context.Context) (err error) {
		got, _, err = c.readRecord(rctx)
		return err
	})
	if err != nil {
		return 0, fleet.Record{}, c.unreachable("join: read the channel", err)
	}
	if u, found, err := c.decodeRead(got); found {
		if err != nil {
			return 0, fleet.Record{}, err
		}
		return c.joined(ctx, u)
	}
	val, err := encodeRecord(1, c.Publisher(), c.now(), local)
	if err != nil {
		return 0, fleet.Record{}, err
	}
	row, err := json.Marshal(WorkerRow{ID: c.id, PID: c.pid, Host: c.host, Worker: c.worker, Fleet: c.fleet,
		AppliedVersion: 1, AppliedDigest: local.Digest(), State: StateOK, Fingerprint: local.Fingerprint, Heartbeat: c.now().UTC()})
	if err != nil {
		return 0, fleet.Record{}, err
	}
	gctx, cancel := c.reqCtx(ctx)
	lease, err := c.cli.Grant(gctx, int64(DefaultLeaseTTL/time.Second))
	cancel()
	if err != nil {
		return 0, fleet.Record{}, c.unreachable("join: grant the row's lease", err)
	}
	tctx, cancel := c.reqCtx(ctx)
	defer cancel()
	key := c.Key()
	resp, err := c.writeRecord(tctx, 1, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, val,
		[]clientv3.Op{clientv3.OpPut(c.rowKey(), string(row), clientv3.WithLease(lease.ID))}, c.recordOps())
	if err != nil {
		return 0, fleet.Record{}, c.writeFailed("join", err, len(val))
	}
	if resp.Succeeded {
		c.joinLease.Store(int64(lease.ID))
		c.ownRev.Store(resp.Header.Revision)
		return 1, local, nil
	}
	_, _ = c.cli.Revoke(tctx, lease.ID) // expires with its TTL if this fails
	u, found, err := c.decodeRead(recordKVs(resp.Responses))
	switch {
	case !found:
		return 0, fleet.Record{}, fmt.Errorf("%w: the key vanished during join", ErrMalformed)
	case err != nil:
		return 0, fleet.Record{}, err
	}
	return c.joined(ctx, u)
}

// joined vets the record a join found.
func (c *Channel) joined(ctx context.Context, u Update) (uint64, fleet.Record, error) {
	if err := c.vet(ctx, u); err != nil {
		return 0, fleet.Record{}, err
	}
	if u.Rollout != nil && u.Rollout.Phase != reconf.RolledBack {
		return c.joinRollout(ctx, u)
	}
	return u.Version, u.Record, nil
}

// vet checks that u's publisher had a presence row under this channel's
// prefix at the revision that wrote u. When etcd has compacted that
// revision away (the record is older than the channel's history, 5
// minutes on the embedded member), vetCompacted asks the fleet instead.
// An unknown publisher is an error wrapping ErrUnknownPublisher; an etcd
// failure wraps ErrUnreachable.
//
// A record this worker wrote itself (see own), or one that came with its
// witness (see witness.go), needs no read: the transaction that wrote it
// required the row. Any other is read at its
// revision from the member the client talks to, without a round of raft
// (a serializable read): what a revision held never changes once it is
// committed, so a member that has applied it answers as the leader would,
// and one that has not yet (a read that went to another member than the
// watch, in a cluster) says so and the leader is asked. The linearizable
// read cost every follower a raft round per version, behind the rows
// and history entries the other workers were writing at that moment.
func (c *Channel) vet(ctx context.Context, u Update) error {
	if c.own(u) || u.witnessed {
		return nil
	}
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	key := c.WorkersPrefix() + u.PublishedBy
	resp, err := c.cli.Get(ctx, key, clientv3.WithRev(u.Revision), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if errors.Is(err, rpctypes.ErrFutureRev) {
		resp, err = c.cli.Get(ctx, key, clientv3.WithRev(u.Revision), clientv3.WithCountOnly())
	}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return c.vetCompacted(ctx, u)
	case err != nil:
		return c.unreachable("vet the publisher", err)
	case resp.Count == 0:
		return fmt.Errorf("%w: version %d names publisher %q, which had no presence row under %s when it was written; it is not a worker of this fleet",
			ErrUnknownPublisher, u.Version, u.PublishedBy, c.WorkersPrefix())
	}
	return nil
}

// vetCompacted vets u, whose revision etcd has compacted, by the rows
// present now: its publisher's row, there since before u was written
// (a row deleted and written again has a newer create revision), or a
// worker that applied u's version (workers apply only vetted versions)
// vouch for it. If workers are present and none does, they all refused
// it: so does this one (a worker joining late would otherwise start on
// a record the fleet never ran). With no row at all nobody can tell: u
// is accepted, as the record the fleet last ran, and unvetted says so
// for the Follower to log.
func (c *Channel) vetCompacted(ctx context.Context, u Update) error {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	// The publisher's row and a first page of rows: in a fleet at rest
	// nearly every row vouches, so every worker joining after a
	// compaction (a rolling restart) read every row of the fleet, 4 MB at
	// 10,000 workers, where one page settles it. The rest only when no
	// row of the page does.
	tx, err := c.cli.Txn(ctx).Then(clientv3.OpGet(c.WorkersPrefix()+u.PublishedBy),
		clientv3.OpGet(c.WorkersPrefix(), clientv3.WithPrefix(), clientv3.WithLimit(vetPage))).Commit()
	if err != nil {
		return c.unreachable("vet the publisher of a compacted revision", err)
	}
	vouches := func(kvs []*mvccpb.KeyValue) bool {
		for _, kv := range kvs {
			if string(kv.Key) == c.WorkersPrefix()+u.PublishedBy && kv.CreateRevision <= u.Revision {
				return true
			}
			var r WorkerRow
			if json.Unmarshal(kv.Value, &r) == nil && r.AppliedVersion == u.Version {
				return true
			}
		}
		return false
	}
	page := tx.Responses[1].GetResponseRange()
	if vouches(tx.Responses[0].GetResponseRange().GetKvs()) || vouches(page.GetKvs()) {
		return nil
	}
	n := len(page.GetKvs())
	if page.GetMore() {
		resp, err := c.cli.Get(ctx, c.WorkersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(tx.Header.Revision))
		if err != nil {
			return c.unreachable("vet the publisher of a compacted revision", err)
		}
		if vouches(resp.Kvs) {
			return nil
		}
		n = len(resp.Kvs)
	}
	if n > 0 {
		return fmt.Errorf("%w: version %d names publisher %q; its revision is compacted, the publisher's row is gone, and none of the %d workers present applied it; it is not a version of this fleet",
			ErrUnknownPublisher, u.Version, u.PublishedBy, n)
	}
	c.unvetted.Store(u.Version)
	return nil
}

// vetPage is how many rows the vetting of a compacted record reads
// first (see vetCompacted).
const vetPage = 64

// ownWrite names a record a publish is writing: its version and its
// published_at, the publisher's clock to the nanosecond. Nobody else can
// know that stamp before the record is in etcd, and once it is, any later
// write has a higher version; so a record at that version with that stamp
// and this worker's name is the one this worker wrote.
type ownWrite struct {
	version uint64
	at      time.Time
}

// own reports whether u is a record this worker wrote: at the revision
// its last publish returned, or, while the publish still waits for its
// answer (the watch often delivers the record first), the record it is
// writing.
func (c *Channel) own(u Update) bool {
	if u.PublishedBy != c.id || u.Revision == 0 {
		return false
	}
	if u.Revision == c.ownRev.Load() {
		return true
	}
	w := c.writing.Load()
	return w != nil && w.version == u.Version && w.at.Equal(u.PublishedAt)
}

// takeJoinLease returns the lease of the row Join wrote, once.
func (c *Channel) takeJoinLease() clientv3.LeaseID {
	return clientv3.LeaseID(c.joinLease.Swap(0))
}

// Publish implements fleet.Channel: it writes rec as version held+1 if the
// key's version is still held. If another worker published first it
// returns an *reconf.Error with reason superseded; an etcd failure is
// returned as an error wrapping ErrUnreachable (the runtime reports it as
// cluster_unavailable).
func (c *Channel) Publish(ctx context.Context, held uint64, rec fleet.Record) (uint64, error) {
	at := c.now().UTC()
	val, err := encodeRecord(held+1, c.Publisher(), at, rec)
	if err != nil {
		return 0, err
	}
	c.writing.Store(&ownWrite{version: held + 1, at: at})
	tctx, cancel := c.reqCtx(ctx)
	defer cancel()
	key := c.Key()
	resp, err := c.writeRecord(tctx, held+1, []clientv3.Cmp{clientv3.Compare(clientv3.Version(key), "=", int64(held)), c.rowPresent()}, val,
		nil, []clientv3.Op{clientv3.OpGet(c.rowKey(), clientv3.WithCountOnly()), clientv3.OpGet(key, clientv3.WithKeysOnly())})
	if err != nil {
		if rev, ok := c.landed(ctx, held+1, val); ok && !recordTooLarge(err) {
			c.ownRev.Store(rev)
			return held + 1, nil
		}
		return 0, c.writeFailed("publish", err, len(val))
	}
	if !resp.Succeeded {
		// A newer version is the answer even without the row: with it, the
		// publish would lose all the same.
		if resp.Responses[0].GetResponseRange().Count == 0 && !moved(resp.Responses[1].GetResponseRange(), held) {
			return 0, c.errNoRow()
		}
		if v, ok := c.publishOverRefused(ctx, held, rec); ok {
			return v, nil
		}
		return 0, reconf.Errorf(reasons.Superseded,
			"another worker published a newer version than %d first; this worker follows it (status shows whether it applied) and the operator may retry", held)
	}
	c.ownRev.Store(resp.Header.Revision)
	c.timing.committed(held+1, at, resp.Header.Revision)
	return held + 1, nil
}

// moved reports whether a keys-only read of the config key found it at a
// version other than held.
func moved(r *etcdserverpb.RangeResponse, held uint64) bool {
	var v uint64
	if len(r.GetKvs()) > 0 {
		v = uint64(r.Kvs[0].Version)
	}
	return v != held
}

// landed reports whether a publish whose answer did not come back was
// written all the same, and at which revision: the key holds version v with exactly val (which
// names this worker and the publish's own time, so no other write can
// match it). etcd commits a transaction whose reply is then lost when the
// publishing worker is stopped after sending it, or etcd is stopped
// between commit and reply; without this read the worker answered
// cluster_unavailable for a version every worker then applied. One read:
// if it fails too, or the key has moved past v, the outcome stays unknown
// and the publish is reported unavailable (the runtime's message says the
// write may have landed).
func (c *Channel) landed(ctx context.Context, v uint64, val string) (rev int64, ok bool) {
	gctx, cancel := c.reqCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(gctx, c.Key())
	if err != nil || len(resp.Kvs) != 1 || uint64(resp.Kvs[0].Version) != v || string(resp.Kvs[0].Value) != val {
		return 0, false
	}
	return resp.Kvs[0].ModRevision, true
}

// publishOverRefused writes rec over a newer version that no worker may
// apply (malformed, of an unknown publisher, or of a newer format than
// this worker reads), with compare-and-set on that version, so that a
// record nobody applies cannot block every publish. It reports whether
// it wrote.
func (c *Channel) publishOverRefused(ctx context.Context, held uint64, rec fleet.Record) (uint64, bool) {
	gctx, cancel := c.reqCtx(ctx)
	kvs, _, err := c.readRecord(gctx)
	cancel()
	if err != nil {
		return 0, false
	}
	kv, by := c.pick(kvs)
	if kv == nil || uint64(kv.Version) <= held {
		return 0, false
	}
	u, err := c.decode(kv, by)
	if err == nil {
		err = c.vet(ctx, u)
	}
	if err == nil || errors.Is(err, ErrUnreachable) {
		return 0, false // a good newer version: this publish lost the race
	}
	cur := uint64(kv.Version)
	val, err := encodeRecord(cur+1, c.Publisher(), c.now(), rec)
	if err != nil {
		return 0, false
	}
	tctx, cancel := c.reqCtx(ctx)
	defer cancel()
	tx, err := c.writeRecord(tctx, cur+1, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(c.Key()), "=", kv.ModRevision), c.rowPresent()}, val, nil, nil)
	if err != nil || !tx.Succeeded {
		return 0, false
	}
	c.ownRev.Store(tx.Header.Revision)
	return cur + 1, true
}

// Version is what a runtime asks before a no-op (see fleet.Channel): the key's current version (0
// for an empty channel), read keys-only. An etcd failure wraps
// ErrUnreachable.
func (c *Channel) Version(ctx context.Context) (uint64, error) {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.Key(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, c.unreachable("read the version", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return uint64(resp.Kvs[0].Version), nil
}

// Latest reads the current version. An empty channel is Update{} (version
// 0). rev is the store revision the read saw: watching from rev+1 misses
// nothing and replays nothing.
func (c *Channel) Latest(ctx context.Context) (u Update, rev int64, err error) {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	kvs, rev, err := c.readRecord(ctx)
	if err != nil {
		return Update{}, 0, c.unreachable("read", err)
	}
	u, _, err = c.decodeRead(kvs)
	return u, rev, err
}

// writeFailed classifies a failed write of a record of size bytes: too
// large for the cluster (its own reason: retrying cannot help), refused
// to this worker's etcd user (its message names the grants), or
// unreachable.
func (c *Channel) writeFailed(op string, err error, size int) error {
	switch {
	case recordTooLarge(err):
		return reconf.Errorf(reasons.RecordTooLarge,
			"the cluster record is %d bytes, more than the cluster accepts in one request; raise etcd's --max-request-bytes (an external cluster's default is 1.5 MiB; the embedded member accepts 8 MiB) or make the live configuration smaller", size)
	case permissionDenied(err):
		e := reconf.Errorf(reasons.ClusterUnavailable, "%s: nothing was written, and retrying cannot help until the grants change: %s", op, c.grantsNeeded())
		// The refusal stays reachable (errors.Is), for a caller that
		// tells it apart from an outage.
		e.Err = err
		return e
	}
	return c.unreachable(op, err)
}

// recordTooLarge reports whether etcd refused a request for its size:
// over the server's --max-request-bytes, or over a gRPC message limit on
// either side (ResourceExhausted, which etcd also uses for a full
// database, which is not about this request).
func recordTooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return true
	}
	return status.Code(err) == codes.ResourceExhausted && !errors.Is(err, rpctypes.ErrNoSpace)
}

// latestAfter is Latest for a reader that already holds version have: it
// reads the key's version alone and the record only when it is newer, so
// that the followers' periodic resync costs a few bytes, not a whole
// configuration, per worker and second. An Update not newer than have
// carries no record. In the same read it counts this worker's row, so
// that a row that vanished while its lease lives is noticed (row false).
func (c *Channel) latestAfter(ctx context.Context, have uint64, hostKey string) (u Update, rev int64, row, host bool, err error) {
	rctx, cancel := c.reqCtx(ctx)
	ops := []clientv3.Op{
		clientv3.OpGet(c.Key(), clientv3.WithKeysOnly()),
		clientv3.OpGet(c.rowKey(), clientv3.WithCountOnly()),
	}
	if hostKey != "" {
		ops = append(ops, clientv3.OpGet(hostKey, clientv3.WithCountOnly()))
	}
	tx, err := c.cli.Txn(rctx).Then(ops...).Commit()
	cancel()
	if err != nil {
		return Update{}, 0, false, false, c.unreachable("read", err)
	}
	row = tx.Responses[1].GetResponseRange().Count > 0
	host = hostKey == "" || tx.Responses[2].GetResponseRange().Count > 0
	kvs := tx.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return Update{}, tx.Header.Revision, row, host, nil
	}
	if kv := kvs[0]; uint64(kv.Version) <= have {
		return Update{Version: uint64(kv.Version), Revision: kv.ModRevision}, tx.Header.Revision, row, host, nil
	}
	u, rev, err = c.Latest(ctx)
	return u, rev, row, host, err
}

// unreachable wraps a failed request of op in ErrUnreachable.
func (c *Channel) unreachable(op string, err error) error {
	return unreachableUnder(c.prefix, c.appPrefixes, op, err)
}

// unreachableUnder wraps a failed request of op under prefix in
// ErrUnreachable; a request etcd refused to the user also names the
// grants a fleet needs, since no retry cures it.
func unreachableUnder(prefix string, app []string, op string, err error) error {
	if permissionDenied(err) {
		return fmt.Errorf("%w: %s: %w: %s", ErrUnreachable, op, err, grantsNeeded(prefix, app))
	}
	return fmt.Errorf("%w: %s: %w", ErrUnreachable, op, err)
}
