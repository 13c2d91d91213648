package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/configdiff"
)

// CheckReport is the result of a dry run of one configuration file and,
// with a baseline, of the reload from the baseline to it. It holds no
// configuration value: only paths, classes, reasons and safe messages.
type CheckReport struct {
	Config string `json:"config"`
	Valid  bool   `json:"valid"`
	// Outcome is how loading the file ended: published when it is valid,
	// else the failure's outcome (invalid, source-integrity-failed,
	// preparation-failed...).
	Outcome reconf.Outcome `json:"outcome"`
	Reason  reconf.Reason  `json:"reason"`
	Message string         `json:"message"`
	// Problems lists at most 64 defects (reconf.Result's bound);
	// ProblemCount is the full number when more were found. Both have the
	// management API's shape (lowercase keys).
	Problems     []reconf.Problem `json:"problems,omitempty"`
	ProblemCount int              `json:"problem_count,omitempty"`
	// Cluster is true when the file was checked as a cluster worker would
	// load it (server.workers > 1, server.cluster, or WithClusterCheck):
	// literal secrets are then refused with secret_not_propagatable.
	Cluster bool `json:"cluster,omitempty"`
	// ClusterEndpoints is the file's server.cluster, when it names one
	// (validated URLs: the file refuses credentials in them), so that a
	// caller can check the cluster's access as serve would.
	ClusterEndpoints []string `json:"cluster_endpoints,omitempty"`

	// Against is the baseline's report, when one was given.
	Against *CheckReport `json:"against,omitempty"`
	// Diff is the classified change from the baseline to the file.
	Diff *CheckDiff `json:"diff,omitempty"`
}

// CheckDiff is a classified diff between two valid configurations.
type CheckDiff struct {
	// Live lists changed paths a reload applies.
	Live []string `json:"live"`
	// RestartRequired lists changed paths that need a restart; any of them
	// makes a reload restart-required.
	RestartRequired []string `json:"restart_required"`
	// ReloadOutcome is what a reload from the baseline to the file would
	// end in: published, no-op or restart-required.
	ReloadOutcome reconf.Outcome `json:"reload_outcome"`
}

// Check compiles the file at path with the same compiler and consumers as
// serve (strict decode, secrets, validation, system prompt files), without
// listening or publishing anything. A file whose server section makes it a
// cluster worker (or any file, with WithClusterCheck) is also compiled as
// a cluster worker would compile it. With a non-empty against, it compiles
// that file too and diffs the two. The returned error is for a check that
// could not run at all; a file that does not pass is a report with Valid
// false.
func Check(ctx context.Context, path, against string, opts ...Option) (*CheckReport, error) {
	rep, cfg := checkOne(ctx, path, opts)
	if against == "" {
		return rep, nil
	}
	base, baseCfg := checkOne(ctx, against, opts)
	rep.Against = base
	if cfg == nil || baseCfg == nil {
		return rep, nil
	}
	d := &CheckDiff{Live: []string{}, RestartRequired: []string{}}
	for _, c := range configdiff.Paths(baseCfg, cfg) {
		switch c.Class {
		case "live":
			d.Live = append(d.Live, c.Path)
		case "derived":
		default:
			d.RestartRequired = append(d.RestartRequired, c.Path)
		}
	}
	switch {
	case len(d.RestartRequired) > 0:
		d.ReloadOutcome = reconf.RestartRequired
	case len(d.Live) == 0:
		d.ReloadOutcome = reconf.NoOp
	default:
		d.ReloadOutcome = reconf.Published
	}
	rep.Diff = d
	return rep, nil
}

// checkOne loads path into a throwaway runtime and closes it.
func checkOne(ctx context.Context, path string, opts []Option) (*CheckReport, *Config) {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	rep := &CheckReport{Config: abs}
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	rep.Cluster = o.clusterCheck
	g, err := New(ctx, path, opts...)
	if err == nil && !o.clusterCheck && g.Config().Server.Clustered() {
		// The file makes serve a cluster worker: check it as one.
		_ = g.rt.Close(context.WithoutCancel(ctx))
		rep.Cluster = true
		g, err = New(ctx, path, append(opts, WithClusterCheck())...)
	}
	if err != nil {
		describe(rep, err)
		return rep, nil
	}
	defer g.rt.Close(context.WithoutCancel(ctx))
	cfg := g.rt.Current().Config()
	rep.ClusterEndpoints = cfg.Server.Cluster
	rep.Valid = true
	rep.Outcome, rep.Reason = reconf.Published, reconf.ReasonDryRunOK
	rep.Message = "the configuration is valid"
	return rep, cfg
}

// describe fills a report from a load error.
func describe(rep *CheckReport, err error) {
	var e *reconf.Error
	var ce *reconf.ConsumerError
	switch {
	case errors.As(err, &e):
		rep.Outcome, rep.Reason, rep.Message, rep.Problems = e.Outcome(), e.Reason, e.Message, e.Problems
		if n := e.Count(); n > len(e.Problems) {
			rep.ProblemCount = n
		}
	case errors.As(err, &ce):
		rep.Outcome, rep.Reason, rep.Message = reconf.PreparationFailed, reconf.ReasonConsumerRefused, ce.Error()
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		rep.Outcome, rep.Reason, rep.Message = reconf.Canceled, reconf.ReasonDeadline, "the check was canceled"
	default:
		rep.Outcome, rep.Reason, rep.Message = reconf.InternalFailed, reconf.ReasonInternal, err.Error()
	}
}
