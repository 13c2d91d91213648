// Package fleetstatus reads what a status document says of the fleet
// (the cluster fields a worker adds to its status) and puts it in the
// lines and tables reconfd's commands print: convergence, the workers'
// rows, each backend's limiter, and what wait decides of a generation.
package fleetstatus

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/propagate"
)

// Convergence is the first line of status and history: for a fleet,
// whether every worker runs the cluster version; for one process, its
// generation.
func Convergence(st admin.StatusResponse) string {
	raw := func(k string) json.RawMessage {
		b, _ := st.Extra[k].(json.RawMessage)
		return b
	}
	if raw("cluster_version") == nil && raw("cluster_reachable") == nil {
		return fmt.Sprintf("SINGLE PROCESS at generation %d", st.ActiveGeneration)
	}
	var (
		version   *uint64
		reachable = true
		rows      []propagate.WorkerRow
	)
	_ = json.Unmarshal(raw("cluster_version"), &version)
	if b := raw("cluster_reachable"); b != nil {
		_ = json.Unmarshal(b, &reachable)
	}
	_ = json.Unmarshal(raw("workers"), &rows)
	if !reachable || version == nil {
		return "FLEET STATE UNKNOWN: etcd is unreachable from the answering worker"
	}
	at := 0
	var behind []string
	for _, r := range rows {
		if r.AppliedVersion == *version {
			at++
			continue
		}
		b := fmt.Sprintf("%s at %d", r.ID, r.AppliedVersion)
		if r.LastError != "" {
			b += " (" + string(r.LastError) + ")"
		}
		behind = append(behind, b)
	}
	var gone []propagate.HostRow
	_ = json.Unmarshal(raw("unreachable_hosts"), &gone)
	hosts := ""
	for i, h := range gone {
		if i == 0 {
			hosts = "; unreachable: "
		} else {
			hosts += ", "
		}
		hosts += fmt.Sprintf("host %s (last at version %d)", h.Host, h.LastVersion)
	}
	if len(rows) > 0 && at == len(rows) {
		return fmt.Sprintf("CONVERGED: all %d workers at version %d", len(rows), *version) + hosts
	}
	s := fmt.Sprintf("NOT CONVERGED: %d of %d workers at version %d", at, len(rows), *version)
	if len(behind) > 0 {
		s += "; " + strings.Join(behind, ", ")
	}
	return s + hosts
}

// GenerationLine is "generation G: a of b applied, c rejected (reasons)"
// for a cluster whose state the answering worker read, counted over the
// live workers' rows; "" otherwise.
func GenerationLine(st admin.StatusResponse) string {
	var (
		version *uint64
		rows    []propagate.WorkerRow
	)
	b, _ := st.Extra["cluster_version"].(json.RawMessage)
	if b == nil || json.Unmarshal(b, &version) != nil || version == nil {
		return ""
	}
	if b, _ := st.Extra["workers"].(json.RawMessage); b != nil {
		_ = json.Unmarshal(b, &rows)
	}
	return propagate.Summarize(*version, rows).String(*version)
}
