package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// ProcessWidePaths are reconfd's fields that one process holds one value
// of for every request, so a rollout cannot split them: a staged change
// to any of them is refused as rollout_field_not_splittable, and is
// published with a plain reload (--rollout all_at_once). Each entry says
// why (docs/rollout.md lists them for operators).
var ProcessWidePaths = []string{
	// The listener presents one certificate to every new connection,
	// before any request says who its client is.
	"server.tls",
	// The connection caps count connections, not requests.
	"server.max_connections",
	"server.max_connections_per_address",
	// One log for the whole process: its level, and any log setting to
	// come.
	"logging",
	// One tracer and one access log for the whole process.
	"observability",
	// The client keys: the active generation's decide whether a body is
	// read at all, before the request is pinned, and a key is what
	// places its client in the split.
	"auth.api_keys",
	// The named keys likewise, and their limits hold across the fleet:
	// one window per key, whichever generation serves the request.
	"auth.keys",
	// The body limit applies while the body is read, before the pin.
	"limits.max_request_body_bytes",
	// One concurrency gate per backend name, shared by every generation.
	"backends[*].max_concurrency",
	// The rollout settings decide the split itself.
	"rollout",
}

// ReasonStrategyUnknown is the reason of a reload that names a strategy
// the active configuration neither declares nor has as a preset.
const ReasonStrategyUnknown reconf.Reason = "rollout_strategy_unknown"

// Reloads returns what reconfd's triggers (SIGHUP, the management API)
// reload through: Reload stages the change with the strategy the reload
// names (admin.WithRollout), else with the configuration's
// rollout.default; all_at_once, or no default, publishes at once.
func (g *Gateway) Reloads() admin.Runtime { return stagedReloads{g} }

type stagedReloads struct{ g *Gateway }

func (s stagedReloads) Reload(ctx context.Context, t reconf.Trigger) (reconf.Result, error) {
	return s.g.ReloadStaged(ctx, t)
}

func (s stagedReloads) Status() reconf.Status { return s.g.rt.Status() }

// ReloadStaged runs one attempt with the strategy chosen as Reloads says.
// The strategies are the active configuration's: a strategy declared by
// the change itself is usable from the next reload on.
func (g *Gateway) ReloadStaged(ctx context.Context, t reconf.Trigger) (reconf.Result, error) {
	rc := &g.rt.Current().Config().Rollout
	name, named := admin.RolloutName(ctx)
	if !named {
		name = rc.Default
	}
	if name == "" || name == PublishAtOnce {
		if admin.Reapplying(ctx) {
			now, _ := reconf.Preset("all_at_once")
			now.FinalBake = 0 // publishes at once, as a plain reload would
			return g.rt.Reapply(ctx, t, now)
		}
		return g.rt.Reload(ctx, t)
	}
	s, ok := rc.Strategy(name)
	if !ok {
		id := g.rt.Current().ID()
		return reconf.Result{Outcome: reconf.Invalid, Reason: ReasonStrategyUnknown, Trigger: t, PreviousGeneration: id, Generation: id,
			Message: fmt.Sprintf("no rollout strategy is named %q; the configuration offers %s", safeSegment(name), strings.Join(rc.Names(), ", ")),
			Started: time.Now()}, nil
	}
	if admin.Reapplying(ctx) {
		return g.rt.Reapply(ctx, t, s)
	}
	return g.rt.Stage(ctx, t, s)
}
