// Package propagate makes several workers of one service (processes on
// one host, or replicas on many hosts) act as one: a reload accepted by any
// worker becomes every worker's generation, under the same number, within
// a documented bound. The shared channel is etcd: embedded on a single
// host (package propagate/embedded), an existing cluster otherwise.
//
// # Wiring a worker
//
//	cli, err := propagate.Connect(endpoints, logger)
//	ch, err := propagate.NewChannel(cli, "/reconf/gateway")
//	rt, err := reconf.New[Config](ctx, src, ch.Option())
//	f, err := propagate.Follow(ctx, ch, rt)
//	srv, err := admin.New(rt, admin.WithStatusFields(f.StatusFields))
//	...
//	f.Close(ctx); rt.Close(ctx); cli.Close()
//
// # Keys and versions
//
// Under a prefix P, the key P/config holds the current record as JSON:
// version, published_by, published_at, bootstrap_fingerprint, live (the
// live fields as YAML, secrets only as ${env:...}/${file:...} references)
// and files (content digests of referenced files). The cluster version is
// that key's own etcd version counter, so versions are dense and totally
// ordered: Join creates the key as version 1 only if it does not exist,
// and Publish writes held+1 only if the key's version is still held; a
// loser gets busy with reason superseded. The key is never deleted.
//
// Each worker keeps a row at P/workers/<id> under a lease (see WorkerRow):
// its own, or one the process already keeps alive (WithSharedLease). The
// lease keeps the row alive; the row is written only when it changes, so
// an idle fleet writes nothing. Channel.Fleet reads the cluster version
// and every row at one revision.
//
// # Following
//
// A Follower reads the key, then watches it from the read's revision, and
// applies every version newer than the one its runtime holds, through
// the runtime's staged path (the one a reload takes). Every resync
// interval (2s) it makes sure the watch missed nothing, as a safety net: at rest by its lease renewals' answers
// (WithLeaseAnswers: the store's revision is one the watch has reached),
// a renewal asked for when a proof is due (WithLeaseRenewal), or a
// progress request where a renewal cannot prove, and a read when that
// goes unanswered, and by one every interval while the watch is broken.
// A watch of its own row sees the row deleted under a live lease; a read
// every thirtieth interval finds its host's record gone. A failed apply keeps the runtime's generation whole;
// the follower records the reason in its row and retries with backoff
// (50ms doubling to 1s) and at once on every newer version.
// It never applies a version not greater than the one held, and neither
// does the runtime.
//
// # Bounded staleness
//
// With etcd reachable and an apply that succeeds, a worker applies a
// version within StalenessBound (resync interval + maximum backoff, 3s by
// default) of its publication, plus the apply's own duration; in practice
// the watch delivers it within milliseconds. docs/design/propagation.md
// has the measured figures and the failure modes.
//
// # Concurrency
//
// Channel and Follower are safe for concurrent use. A Follower owns two
// goroutines (the apply loop and the presence loop) and Close joins
// them. Neither holds its mutex while calling etcd or the runtime.
package propagate
