package propagate

import (
	"context"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The witness is the key P/config/by. Every transaction of this package
// that writes the record writes it too, holding the publisher's ID, and
// every such transaction requires the publisher's row. So a witness whose
// mod revision is the record's own names a publisher whose row existed
// when the record was written: only one transaction writes two keys at
// one revision. A follower that sees both in the watch (or in one read)
// vets the record without asking etcd; that read was one round trip per
// follower and version on the path from publish to applied, and a request
// etcd served for each of them.
//
// A record without a witness at its revision (written by an earlier
// version of this package, or by hand) is vetted by the read, as before.
// The witness is never deleted and holds one ID: it does not grow with
// the fleet, and nobody watches it alone.

func (c *Channel) witnessKey() string { return c.Key() + "/by" }

// recordRange makes a watch of Key cover the witness too: the range
// [P/config, P/config/by\x00) holds those two keys and nothing this
// package writes besides. A watch on it delivers a transaction's events in
// one response, in revision order, so the witness comes with its record.
func (c *Channel) recordRange() clientv3.OpOption {
	return clientv3.WithRange(c.witnessKey() + "\x00")
}

// recordOps read the record and its witness: two exact reads, for one
// transaction (one revision), not a read of recordRange, which holds too
// whatever someone else put between the two keys (a P/config.bak, the
// keys of a fleet whose prefix is P/config/a...): every read of the
// record carried them, and past the client's 8 MiB a worker could not
// join.
func (c *Channel) recordOps() []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(c.Key()), clientv3.OpGet(c.witnessKey())}
}

// readRecord reads the record and its witness at one revision; rev is
// the store revision the read saw.
func (c *Channel) readRecord(ctx context.Context) (kvs []*mvccpb.KeyValue, rev int64, err error) {
	resp, err := c.cli.Txn(ctx).Then(c.recordOps()...).Commit()
	if err != nil {
		return nil, 0, err
	}
	return recordKVs(resp.Responses), resp.Header.Revision, nil
}

// recordKVs returns the key-values the responses of recordOps hold.
func recordKVs(rs []*etcdserverpb.ResponseOp) []*mvccpb.KeyValue {
	var kvs []*mvccpb.KeyValue
	for _, r := range rs {
		kvs = append(kvs, r.GetResponseRange().GetKvs()...)
	}
	return kvs
}

// witnessOp is the witness's write, for a transaction that writes the
// record and requires this worker's row.
func (c *Channel) witnessOp() clientv3.Op { return clientv3.OpPut(c.witnessKey(), c.id) }

// writeRecord commits a transaction that writes the record val and its
// witness, then the ops in then, if cmps hold, else the ops in els. A
// worker whose etcd user may write the record but not the witness (a role
// granted the record's key alone, before the witness existed) writes the
// record alone from then on, as a worker of an earlier version did: its
// records are vetted with the read, the fleet keeps working through an
// upgrade, and its follower says once which grant would restore the
// witness (unwitnessed). A transaction is refused whole, before anything
// is written, so the second try cannot write twice.
//
// It also keeps a copy of the record as version v (see copyOps), unless
// etcd refuses this worker's user the copies' prefix, after which it
// keeps none.
func (c *Channel) writeRecord(ctx context.Context, v uint64, cmps []clientv3.Cmp, val string, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	txn := func(ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(cmps...).Then(append(ops, then...)...).Else(els...).Commit()
	}
	put := clientv3.OpPut(c.Key(), val)
	if c.noWitness.Load() {
		return txn(put)
	}
	var copies []clientv3.Op
	if !c.noCopies.Load() {
		copies = c.copyOps(v, val)
	}
	resp, err := txn(append([]clientv3.Op{c.witnessOp(), put}, copies...)...)
	if permissionDenied(err) && len(copies) > 0 {
		// A user granted the record and its witness but not the copies'
		// prefix: the records go without copies from now on.
		if resp, err = txn(c.witnessOp(), put); err == nil {
			c.noCopies.Store(true)
		}
	}
	if !permissionDenied(err) {
		return resp, err
	}
	alone, err2 := txn(put)
	if permissionDenied(err2) {
		return resp, err // refused without the witness too: not the witness's grant
	}
	if err2 == nil && !c.noWitness.Swap(true) {
		c.unwitnessed.Store(true)
	}
	return alone, err2
}

// pick returns the record and the witness among the key-values of
// recordOps' reads or of a watch response over recordRange; either may be
// nil.
func (c *Channel) pick(kvs []*mvccpb.KeyValue) (rec, by *mvccpb.KeyValue) {
	key, wkey := c.Key(), c.witnessKey()
	for _, kv := range kvs {
		switch string(kv.Key) {
		case key:
			rec = kv
		case wkey:
			by = kv
		}
	}
	return rec, by
}

// witnessed reports whether by was written with u, in the same
// transaction, and names u's publisher.
func witnessed(u Update, by *mvccpb.KeyValue) bool {
	return by != nil && u.Revision != 0 && by.ModRevision == u.Revision && string(by.Value) == u.PublishedBy
}

// decode decodes the record kv, witnessed when by was written with it.
func (c *Channel) decode(kv, by *mvccpb.KeyValue) (Update, error) {
	u, err := decodeKV(kv)
	if err == nil {
		u.witnessed = witnessed(u, by)
	}
	return u, err
}

// decodeRead decodes the record of recordOps' reads; found is
// false when the channel is empty.
func (c *Channel) decodeRead(kvs []*mvccpb.KeyValue) (u Update, found bool, err error) {
	kv, by := c.pick(kvs)
	if kv == nil {
		return Update{}, false, nil
	}
	u, err = c.decode(kv, by)
	return u, true, err
}

// witnessIn returns the witness written at rev among a watch response's
// events, if any. etcd sends the events of one revision in one response.
func (c *Channel) witnessIn(evs []*clientv3.Event, rev int64) *mvccpb.KeyValue {
	wkey := c.witnessKey()
	for _, ev := range evs {
		if ev.Type == mvccpb.PUT && ev.Kv.ModRevision == rev && string(ev.Kv.Key) == wkey {
			return ev.Kv
		}
	}
	return nil
}
