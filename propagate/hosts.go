package propagate

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// HostRow is what the fleet remembers of a host: the version its
// workers last wrote in their rows. It lives under P/hosts/<host> on a
// lease of its own, longer than the rows' (DefaultHostTTL), which the
// host's workers renew, so it outlives the rows: a host whose rows are
// gone (its leases lapsed: etcd cut off, the host down, every worker
// killed) while its record is there is unreachable, and status says so
// with its last version, until the record's lease lapses too and the
// fleet forgets the host. A host's last worker to leave cleanly deletes
// the record at once.
type HostRow struct {
	Host string `json:"host"`
	// LastVersion is the applied version of the last row a worker of
	// the host wrote; LastSeen when it wrote it.
	LastVersion uint64    `json:"last_version"`
	LastSeen    time.Time `json:"last_seen"`
	// State is "unreachable" in Fleet.Unreachable; never stored.
	State string `json:"state,omitempty"`
}

// HostUnreachable is HostRow.State of a host with a record and no row.
const HostUnreachable = "unreachable"

// HostsPrefix returns the etcd prefix of the host records.
func (c *Channel) HostsPrefix() string { return c.prefix + "/hosts/" }

// hostKey is the record of host.
func (c *Channel) hostKey(host string) string {
	return c.HostsPrefix() + strings.ReplaceAll(host, "/", "_")
}

// hostPut writes a host's record beside a row the host's worker writes,
// on the worker's host lease: in the row's transaction, so it costs no
// request of its own.
func (c *Channel) hostPut(row WorkerRow, lease clientv3.LeaseID) clientv3.Op {
	b, _ := json.Marshal(HostRow{Host: row.Host, LastVersion: row.AppliedVersion, LastSeen: row.Heartbeat})
	return clientv3.OpPut(c.hostKey(row.Host), string(b), clientv3.WithLease(lease))
}

// forgetHost deletes host's record when no row of the host is left: the
// host left the fleet on purpose. Every worker closing calls it after
// deleting its own row, and reads are linearizable, so the last read of
// a fleet that stops together sees every row gone.
//
// It reads the rows whose ID begins as this worker's does with the host's
// name (reconfd's IDs and the default ones do), not every row: each
// host's last worker reading the whole fleet's rows made a fleet's stop
// cost the square of its size (10,000 hosts, 4 MB each). A worker of the
// host whose ID does not begin so is not seen, and the record it still
// needs is written again with its next row write after a resync read
// finds it gone.
func (c *Channel) forgetHost(ctx context.Context, host string) error {
	if c.hostsDenied.Load() {
		return nil
	}
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	rows := c.WorkersPrefix()
	if p := strings.ReplaceAll(host, "/", "_") + "-"; strings.HasPrefix(c.id, p) {
		rows += p
	}
	resp, err := c.cli.Get(ctx, rows, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		var r WorkerRow
		if json.Unmarshal(kv.Value, &r) == nil && r.Host == host {
			return nil
		}
	}
	_, err = c.cli.Delete(ctx, c.hostKey(host))
	return err
}

// unreachableHosts returns the host records of kvs whose host has no
// row in rows, sorted by host.
func unreachableHosts(kvs [][]byte, rows []WorkerRow) []HostRow {
	live := map[string]bool{}
	for _, r := range rows {
		live[r.Host] = true
	}
	var out []HostRow
	for _, v := range kvs {
		var h HostRow
		if json.Unmarshal(v, &h) != nil || h.Host == "" || live[h.Host] {
			continue
		}
		h.State = HostUnreachable
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}
