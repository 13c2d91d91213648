package gateway

import (
	"context"

	"github.com/reconfhq/reconf"
)

// History returns the newest n attempts (all that are kept when n <= 0),
// newest first: this process's, or, on a worker of a cluster, the whole
// fleet's as etcd holds them, with every worker's apply folded into the
// entry of the version it applied. It is safe for concurrent use, for
// admin.WithHistory.
func (g *Gateway) History(ctx context.Context, n int) ([]reconf.HistoryEntry, error) {
	if g.cluster != nil {
		return g.cluster.history.Entries(ctx, n)
	}
	return g.history.Entries(n), nil
}

// RecordHistory adds an entry the runtime does not see itself, such as a
// restart, to the history History reads: this process's, or the fleet's
// (written at once, named for this worker unless e.Worker is set).
func (g *Gateway) RecordHistory(ctx context.Context, e reconf.HistoryEntry) error {
	if g.cluster != nil {
		return g.cluster.history.Record(ctx, e)
	}
	g.history.Add(e)
	return nil
}
