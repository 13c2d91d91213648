package propagate

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf"
)

// State is a worker's propagation state, as its row shows it.
type State uint8

// The states. The zero State is invalid.
const (
	// StateOK: the worker holds the newest version it has seen and can
	// reach the channel.
	StateOK State = iota + 1
	// StateDegraded: the worker cannot reach the channel; it keeps serving
	// its last-good generation and resyncs when etcd answers again.
	StateDegraded
	// StateFailing: applying the newest version failed here; the worker
	// keeps its previous generation whole and retries with backoff and on
	// every newer version. The row's last_error says why.
	StateFailing
)

var stateNames = [...]string{StateOK: "ok", StateDegraded: "degraded", StateFailing: "failing"}

// String returns "ok", "degraded" or "failing".
func (s State) String() string {
	if s >= StateOK && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText encodes the state's name; an invalid state is an error.
func (s State) MarshalText() ([]byte, error) {
	if s < StateOK || int(s) >= len(stateNames) {
		return nil, fmt.Errorf("propagate: invalid state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText decodes a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if i > 0 && n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("propagate: unknown state %q", b)
}

// WorkerRow is one worker's presence row. It is held under a lease, so it
// disappears within the lease TTL when the worker dies. Nothing in it is
// secret.
type WorkerRow struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	Host string `json:"host"`
	// Worker is the worker's slot in its fleet, Fleet the fleet's ID
	// (see WithFleet); empty for a process that is its host's only
	// worker.
	Worker string `json:"worker,omitempty"`
	Fleet  string `json:"fleet,omitempty"`
	// AppliedVersion is the cluster version of the worker's active
	// generation.
	AppliedVersion uint64 `json:"applied_version"`
	// AppliedDigest digests the live configuration the worker applied,
	// as the channel's record carries it: every worker at one version reports
	// the same digest, so a differing one shows a worker running other
	// content under the same number.
	AppliedDigest string `json:"applied_digest,omitempty"`
	State         State  `json:"state"`
	// LastError is the reason of the last failed apply of a version still
	// newer than AppliedVersion, or channel_unreachable; empty when none.
	LastError   reconf.Reason `json:"last_error,omitempty"`
	Fingerprint string        `json:"bootstrap_fingerprint"`
	// Heartbeat is when the row was last written: rows are written when
	// they change (for a new version, right after the apply), not on a
	// timer; the lease keeps them alive.
	Heartbeat time.Time `json:"heartbeat"`
	// BootstrapDrift is set by Fleet on a row whose fingerprint differs
	// from the majority's (or on every row when there is no majority). It
	// is never stored.
	BootstrapDrift bool `json:"bootstrap_drift,omitempty"`
}

// Fleet is the cluster's state as etcd holds it: the cluster version and
// every live worker's row, read in one transaction.
type Fleet struct {
	ClusterVersion uint64      `json:"cluster_version"`
	Workers        []WorkerRow `json:"workers"`
	// Converged is true when there is at least one row and every row's
	// applied version equals the cluster version.
	Converged bool `json:"converged"`
	// Drift is true when some row is flagged BootstrapDrift.
	Drift bool `json:"bootstrap_drift"`
	// Published says who published the cluster version, when and why;
	// nil when the channel is empty or its record cannot be read.
	Published *Provenance `json:"published,omitempty"`
	// Unreachable lists the hosts the fleet remembers (HostRow) that have
	// no row: their leases lapsed. Their workers are not counted live.
	Unreachable []HostRow `json:"unreachable_hosts,omitempty"`
	Convergence
}

// Convergence counts the live workers (the rows: a dead worker's row is
// gone) against the cluster version.
type Convergence struct {
	// Applied counts the rows at the cluster version, of Live rows.
	Applied int `json:"applied"`
	Live    int `json:"live"`
	// Rejected counts the rows behind the cluster version that refused it
	// (state failing); RejectedReasons are their distinct reasons, sorted.
	Rejected        int             `json:"rejected"`
	RejectedReasons []reconf.Reason `json:"rejected_reasons,omitempty"`
}

// Summarize counts rows against version.
func Summarize(version uint64, rows []WorkerRow) Convergence {
	c := Convergence{Live: len(rows)}
	seen := map[reconf.Reason]bool{}
	for _, r := range rows {
		switch {
		case r.AppliedVersion == version:
			c.Applied++
		case r.State == StateFailing:
			c.Rejected++
			if r.LastError != "" && !seen[r.LastError] {
				seen[r.LastError] = true
				c.RejectedReasons = append(c.RejectedReasons, r.LastError)
			}
		}
	}
	sort.Slice(c.RejectedReasons, func(i, j int) bool { return c.RejectedReasons[i] < c.RejectedReasons[j] })
	return c
}

// String is the summary as reconfd status prints it: "generation G: a of
// b applied, c rejected (reason, ...)".
func (c Convergence) String(version uint64) string {
	s := fmt.Sprintf("generation %d: %d of %d applied, %d rejected", version, c.Applied, c.Live, c.Rejected)
	if len(c.RejectedReasons) > 0 {
		rs := make([]string, len(c.RejectedReasons))
		for i, r := range c.RejectedReasons {
			rs[i] = string(r)
		}
		s += " (" + strings.Join(rs, ", ") + ")"
	}
	return s
}

// Fleet reads the cluster version and every worker row at one revision.
// Rows are sorted by ID. A row that cannot be decoded is skipped.
func (c *Channel) Fleet(ctx context.Context) (Fleet, error) {
	ctx, cancel := c.reqCtx(ctx)
	defer cancel()
	ops := []clientv3.Op{
		clientv3.OpGet(c.Key()),
		clientv3.OpGet(c.WorkersPrefix(), clientv3.WithPrefix()),
	}
	hosts := !c.hostsDenied.Load()
	if hosts {
		ops = append(ops, clientv3.OpGet(c.HostsPrefix(), clientv3.WithPrefix()))
	}
	resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
	if hosts && permissionDenied(err) {
		// A user without the host records (see hostPut): the rows alone.
		c.hostsDenied.Store(true)
		resp, err = c.cli.Txn(ctx).Then(ops[:2]...).Commit()
	}
	if err != nil {
		return Fleet{}, c.unreachable("fleet", err)
	}
	var f Fleet
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		f.ClusterVersion = uint64(kvs[0].Version)
		if u, err := decodeKV(kvs[0]); err == nil {
			f.Published = &u.Provenance
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var r WorkerRow
		if json.Unmarshal(kv.Value, &r) == nil {
			f.Workers = append(f.Workers, r)
		}
	}
	if len(resp.Responses) > 2 {
		var records [][]byte
		for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
			records = append(records, kv.Value)
		}
		f.Unreachable = unreachableHosts(records, f.Workers)
	}
	f.finish()
	return f, nil
}

// finish sorts the rows and computes Converged and the drift flags.
func (f *Fleet) finish() {
	sort.Slice(f.Workers, func(i, j int) bool { return f.Workers[i].ID < f.Workers[j].ID })
	f.Convergence = Summarize(f.ClusterVersion, f.Workers)
	f.Converged = len(f.Workers) > 0
	count := map[string]int{}
	for _, w := range f.Workers {
		count[w.Fingerprint]++
		if w.AppliedVersion != f.ClusterVersion {
			f.Converged = false
		}
	}
	majority, found := "", false
	for fp, n := range count {
		if 2*n > len(f.Workers) {
			majority, found = fp, true
		}
	}
	for i := range f.Workers {
		if !found || f.Workers[i].Fingerprint != majority {
			f.Workers[i].BootstrapDrift = true
			f.Drift = true
		}
	}
}
