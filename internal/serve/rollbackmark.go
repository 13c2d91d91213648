package serve

import (
	"errors"
	"fmt"
	"io"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/rollmark"
)

// rollbackStore returns the option that keeps the rollback mark in its
// state file (package rollmark), or nil with an external cluster, whose
// channel keeps the mark. A supervisor's workers keep it too: their
// embedded etcd's data is removed when the supervisor stops, and the file
// seeds the next fleet's first version. A state directory that is not
// private refuses the start; with none known at all the mark is kept in
// memory only, as the warning says.
func rollbackStore(f Options, lookup env, stderr io.Writer) (gateway.Option, error) {
	if len(f.Cluster) > 0 {
		return nil, nil
	}
	dir, err := rollmark.Dir(f.StateDir, lookup)
	if errors.Is(err, rollmark.ErrNoDir) {
		fmt.Fprintf(stderr, "reconfd: a rollback is kept in memory only: %v\n", err)
		return nil, nil
	}
	if err != nil {
		return nil, exitcode.Fail("--state-dir: %v", err)
	}
	st, err := rollmark.New(dir, f.Config)
	if err != nil {
		return nil, exitcode.Fail("--state-dir: %v", err)
	}
	return gateway.WithRuntimeOptions(fleet.WithRollbackStore(st).(reconf.Option)), nil
}
