package fleetstatus

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/propagate"
)

// Verdict is what one status document says of a generation.
type Verdict struct {
	// Result is "converged", "waiting", "rolled_back" or "superseded".
	Result     string   `json:"result"`
	Generation uint64   `json:"generation"`
	Summary    string   `json:"summary"`
	Lagging    []string `json:"lagging,omitempty"`
}

// rolloutOf returns the rollout of gen that the status shows, or nil.
// Today that is the answering worker's own (Status.Rollout); the fleet's
// rollout state, once status carries it, is read here as well, and wins.
func rolloutOf(st admin.StatusResponse, gen uint64) *reconf.RolloutStatus {
	if r := st.Rollout; r != nil && (r.Candidate == gen || r.ID == gen) {
		return r
	}
	return nil
}

// Judge decides what st says of generation gen.
func Judge(st admin.StatusResponse, gen uint64) Verdict {
	v := Verdict{Result: "waiting", Generation: gen}
	if r := rolloutOf(st, gen); r != nil {
		switch r.Phase {
		case reconf.RolledBack:
			v.Result, v.Summary = "rolled_back", fmt.Sprintf("the rollout ended rolled back (%s by %s); generation %d is active", orDash(r.Reason), orDash(r.Decider), r.Active)
			return v
		case reconf.Running, reconf.Paused:
			v.Summary = fmt.Sprintf("its rollout is %s at %.2f%% of the traffic", r.Phase, float64(r.Share)/100)
			v.Lagging = []string{"the rollout of generation " + fmt.Sprint(gen) + " is " + r.Phase.String()}
			return v
		}
	}
	raw := func(k string) json.RawMessage {
		b, _ := st.Extra[k].(json.RawMessage)
		return b
	}
	if raw("cluster_version") == nil && raw("cluster_reachable") == nil {
		// A single process.
		switch {
		case st.ActiveGeneration == gen:
			v.Result, v.Summary = "converged", "the single process serves it"
		case st.ActiveGeneration > gen:
			v.Result, v.Summary = "superseded", fmt.Sprintf("the single process serves generation %d", st.ActiveGeneration)
		default:
			v.Summary = fmt.Sprintf("the single process serves generation %d", st.ActiveGeneration)
			v.Lagging = []string{fmt.Sprintf("this process at %d", st.ActiveGeneration)}
		}
		return v
	}
	var (
		version   *uint64
		reachable = true
		rows      []propagate.WorkerRow
		gone      []propagate.HostRow
	)
	_ = json.Unmarshal(raw("cluster_version"), &version)
	if b := raw("cluster_reachable"); b != nil {
		_ = json.Unmarshal(b, &reachable)
	}
	_ = json.Unmarshal(raw("workers"), &rows)
	_ = json.Unmarshal(raw("unreachable_hosts"), &gone)
	if !reachable || version == nil {
		v.Summary = "the fleet's state is unknown: etcd is unreachable from the answering worker"
		return v
	}
	if *version > gen {
		v.Result, v.Summary = "superseded", fmt.Sprintf("the cluster is at version %d", *version)
		return v
	}
	v.Summary = propagate.Summarize(gen, rows).String(gen)
	if *version < gen {
		v.Summary += fmt.Sprintf("; the cluster is at version %d", *version)
	}
	for _, r := range rows {
		if r.AppliedVersion == gen { // degraded or not, it serves gen
			continue
		}
		l := fmt.Sprintf("%s at %d (%s", r.ID, r.AppliedVersion, r.State)
		if r.LastError != "" {
			l += ": " + string(r.LastError)
		}
		v.Lagging = append(v.Lagging, l+")")
	}
	var hosts []string
	for _, h := range gone {
		hosts = append(hosts, fmt.Sprintf("%s (last at version %d)", h.Host, h.LastVersion))
	}
	if len(hosts) > 0 {
		v.Summary += "; unreachable, not counted: " + strings.Join(hosts, ", ")
	}
	switch {
	case len(rows) == 0:
		v.Lagging = append(v.Lagging, "no live worker")
	case *version == gen && len(v.Lagging) == 0:
		v.Result = "converged"
	}
	return v
}
