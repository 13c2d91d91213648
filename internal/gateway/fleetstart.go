package gateway

import (
	"encoding/json"
	"slices"
	"sync/atomic"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/restartopt"
)

// RestartFields are the values of Config's restart-class fields that a
// fleet runs on: those of the file the fleet was started (or last
// restarted) with. A worker the supervisor starts in place of one that
// died takes them, not the file's, for its first generation: an edit of a
// restart field waits for `reconfd restart` on every worker alike, instead
// of reaching the replaced worker alone (which then judged every later
// file against other values than its peers', and could serve with another
// auth.mode).
type RestartFields struct {
	Address       string   `json:"address"`
	Workers       int      `json:"workers"`
	Cluster       []string `json:"cluster"`
	ClusterPrefix string   `json:"cluster_prefix"`
	AuthMode      string   `json:"auth_mode"`
}

// RestartFieldsOf returns c's restart-class values.
func RestartFieldsOf(c *Config) RestartFields {
	return RestartFields{Address: c.Server.Address, Workers: c.Server.Workers, Cluster: slices.Clone(c.Server.Cluster),
		ClusterPrefix: c.Server.ClusterPrefix, AuthMode: c.Auth.Mode}
}

// apply sets c's restart-class fields to r's.
func (r RestartFields) apply(c *Config) {
	c.Server.Address, c.Server.Workers, c.Server.Cluster = r.Address, r.Workers, slices.Clone(r.Cluster)
	c.Server.ClusterPrefix, c.Auth.Mode = r.ClusterPrefix, r.AuthMode
}

// differ names the restart fields whose values in c are not r's.
func (r RestartFields) differ(c *Config) []string {
	var out []string
	add := func(differs bool, path string) {
		if differs {
			out = append(out, path)
		}
	}
	add(c.Server.Address != r.Address, "server.address")
	add(c.Server.Workers != r.Workers, "server.workers")
	add(!slices.Equal(c.Server.Cluster, r.Cluster), "server.cluster")
	add(c.Server.ClusterPrefix != r.ClusterPrefix, "server.cluster_prefix")
	add(c.Auth.Mode != r.AuthMode, "auth.mode")
	return out
}

// String is r as JSON, the form a supervisor hands its workers.
func (r RestartFields) String() string {
	b, _ := json.Marshal(r) // strings, ints and a list: cannot fail
	return string(b)
}

// ParseRestartFields reads the form String writes.
func ParseRestartFields(s string) (RestartFields, error) {
	var r RestartFields
	err := json.Unmarshal([]byte(s), &r)
	return r, err
}

// WithFleetRestartFields makes the gateway run on r's restart-class
// values instead of the file's (see RestartFields), for its life: its
// startup load and every cluster version it applies take them
// (restartopt.Restart.Values), while a reload of the file is judged as
// written, so a file whose restart fields differ from r is
// restart-required here as on every other worker. differs, when not nil,
// is told once which fields of the file differed from r.
func WithFleetRestartFields(r RestartFields, differs func(paths []string)) Option {
	var reported atomic.Bool
	return WithRuntimeOptions(restartopt.Option(restartopt.Restart{Values: func(c *Config) {
		if d := r.differ(c); len(d) > 0 && differs != nil && !reported.Swap(true) {
			differs(d)
		}
		r.apply(c)
	}}).(reconf.Option))
}
