package fleetstatus

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/reconfhq/reconf/gate"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/termtext"
	"github.com/reconfhq/reconf/propagate"
)

// WriteTLS writes the data plane's certificate in service, when it
// serves HTTPS.
func WriteTLS(w io.Writer, extra map[string]any) {
	raw, _ := extra["data_plane_tls"].(json.RawMessage)
	var t gateway.TLSStatus
	if raw == nil || json.Unmarshal(raw, &t) != nil {
		return
	}
	fmt.Fprintf(w, "data plane TLS:       %s, valid until %s\n", t.Subject, t.NotAfter.Format(time.RFC3339))
}

// WriteConcurrency writes each backend's limiter as the answering process
// sees it, and whether a cluster worker's gate runs on local shares;
// nothing when the status has no concurrency field.
func WriteConcurrency(w io.Writer, extra map[string]any) {
	raw, _ := extra["concurrency"].(json.RawMessage)
	var backends map[string]gate.Stats
	if raw == nil || json.Unmarshal(raw, &backends) != nil {
		return
	}
	if b, _ := extra["gate_degraded"].(json.RawMessage); b != nil {
		var degraded bool
		_ = json.Unmarshal(b, &degraded)
		state := "ok (limits are the fleet's)"
		if degraded {
			state = "DEGRADED: etcd unreachable; each limit runs on this worker's local share"
		}
		fmt.Fprintf(w, "concurrency gate:     %s\n", state)
	}
	fmt.Fprintf(w, "concurrency:          %d backend(s)\n", len(backends))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  BACKEND\tLIMIT\tCAPACITY\tIN FLIGHT\tWAITING")
	for _, name := range slices.Sorted(maps.Keys(backends)) {
		s := backends[name]
		limit, capacity := "unlimited", "-"
		if s.Limit > 0 {
			limit, capacity = strconv.Itoa(s.Limit), strconv.Itoa(s.Capacity)
			if s.Degraded {
				capacity += " (local share)"
			}
		}
		// A row is cleaned before the tabwriter measures it (termtext).
		fmt.Fprint(tw, termtext.Clean(fmt.Sprintf("  %s\t%s\t%s\t%d\t%d\n", name, limit, capacity, s.InFlight, s.Waiting)))
	}
	_ = tw.Flush()
}

// WriteFleet writes the cluster fields a worker of a cluster adds to its
// status (see propagate.Follower.StatusFields); nothing without them.
func WriteFleet(w io.Writer, extra map[string]any) {
	raw := func(k string) json.RawMessage {
		b, _ := extra[k].(json.RawMessage)
		return b
	}
	if raw("cluster_version") == nil {
		return
	}
	var (
		version   *uint64
		converged bool
		reachable = true
		drift     bool
		rows      []propagate.WorkerRow
	)
	_ = json.Unmarshal(raw("cluster_version"), &version)
	_ = json.Unmarshal(raw("converged"), &converged)
	_ = json.Unmarshal(raw("bootstrap_drift"), &drift)
	if b := raw("cluster_reachable"); b != nil {
		_ = json.Unmarshal(b, &reachable)
	}
	_ = json.Unmarshal(raw("workers"), &rows)
	if !reachable || version == nil {
		fmt.Fprintf(w, "cluster:              unreachable from the answering worker; the fleet's state is unknown\n")
		return
	}
	state := "converged"
	if !converged {
		state = "not converged"
	}
	if drift {
		state += ", bootstrap drift"
	}
	var self propagate.WorkerRow
	if json.Unmarshal(raw("worker"), &self) == nil && self.ID != "" {
		fmt.Fprintf(w, "answered by worker:   %s (the lines above are its own view)\n", self.ID)
	}
	fmt.Fprintf(w, "cluster version:      %d (%s)\n", *version, state)
	var pub *propagate.Provenance
	if json.Unmarshal(raw("published"), &pub) == nil && pub != nil {
		by := pub.Publisher
		fmt.Fprintf(w, "published by:         %s (host %s, pid %d, worker %s, fleet %s), trigger %s, actor %s, at %s\n",
			by.ID, orDash(by.Host), by.PID, orDash(by.Worker), orDash(by.Fleet), orDash(string(pub.Trigger)), orDash(pub.Actor), pub.At.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "workers:              %d\n", len(rows))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tPID\tHOST\tAPPLIED\tDIGEST\tSTATE\tLAST ERROR\tDRIFT")
	for _, r := range rows {
		fmt.Fprint(tw, termtext.Clean(fmt.Sprintf("  %s\t%d\t%s\t%d\t%s\t%s\t%s\t%t\n", r.ID, r.PID, r.Host, r.AppliedVersion, shortDigest(r.AppliedDigest), r.State, orDash(string(r.LastError)), r.BootstrapDrift)))
	}
	var gone []propagate.HostRow
	_ = json.Unmarshal(raw("unreachable_hosts"), &gone)
	for _, h := range gone {
		// A host whose leases lapsed: its workers' rows are gone, its
		// last version is remembered.
		fmt.Fprint(tw, termtext.Clean(fmt.Sprintf("  -\t-\t%s\t%d\t-\t%s\tlease lapsed, last seen %s\t-\n", h.Host, h.LastVersion, propagate.HostUnreachable, h.LastSeen.Format(time.RFC3339))))
	}
	_ = tw.Flush()
}

// shortDigest is an applied digest as the status table shows it: 12 hex
// digits tell rows at one version apart at a glance (the JSON answer has
// all 32); "-" for a worker too old to report one.
func shortDigest(d string) string {
	return orDash(d[:min(len(d), 12)])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
