package propagate

import (
	"context"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rowWatch watches this worker's row for its deletion, which the watch
// of the record does not see (a row deleted under a live lease, or with
// its lease): the row is written again at once. etcd filters the writes
// out (the follower's own row writes come back as nothing), so at rest
// the watch costs no message, where a periodic read found the same up
// to five intervals later.
type rowWatch struct {
	c      clientv3.WatchChan
	cancel context.CancelFunc
}

// watchRow starts the row's watch from rev, the revision of the read that
// found the row, on ctx's stream (the record watch's). It returns nil
// when denied (etcd refused it before).
func (f *Follower) watchRow(ctx context.Context, rev int64, denied bool) *rowWatch {
	if denied {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	return &rowWatch{c: f.ch.cli.Watch(ctx, f.ch.rowKey(), clientv3.WithRev(rev), clientv3.WithFilterPut()), cancel: cancel}
}

// handle takes a response of the watch; it reports false when the watch
// ended (the caller falls back to the periodic reads).
func (rw *rowWatch) handle(f *Follower, wr clientv3.WatchResponse, ok bool, gone *atomic.Bool) bool {
	if !ok || wr.Canceled || wr.Err() != nil {
		return false
	}
	for _, ev := range wr.Events {
		if ev.Type == mvccpb.DELETE {
			gone.Store(true)
			f.markDirty()
		}
	}
	return true
}
