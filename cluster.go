package reconf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/reasons"
)

// confirmCurrent reports, in a cluster whose channel tells its version
// (channelVersion), whether the cluster is ahead of held, the version a
// file equal to this worker's generation was judged against: if it is
// not, the file is in force and the attempt is a no-op; if it is, the
// file is not what the fleet runs, and the attempt goes on to publish it,
// which the channel refuses (busy, superseded) unless the newer version
// is one this worker refused or no worker applies (a worker merely
// catching up waits for it). A channel that cannot be read is
// cluster_unavailable. A dry run (check-config) is judged against this
// worker's generation.
func (r *Runtime[T]) confirmCurrent(ctx context.Context, held uint64, dry bool) (behind bool, err error) {
	cv, ok := r.o.channel.(channelVersion)
	if !ok || dry {
		return false, nil
	}
	v, err := cv.Version(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil:
		return false, &Error{Reason: reasons.ClusterUnavailable, Message: "the file matches this worker's generation, but the cluster channel could not be read to confirm that it is the fleet's; retry", Err: err}
	}
	return v > held, nil
}

// record returns what a cluster publishes for cand.
func (r *Runtime[T]) recordOf(cand *candidate[T]) (fleet.Record, error) {
	live, format, err := encodePayload(cand.cfg)
	if err != nil {
		return fleet.Record{}, &Error{Reason: ReasonInternal, Message: "encoding the live fields failed", Err: err}
	}
	return fleet.Record{Live: live, Format: format, Fingerprint: fingerprintOf(flattenBootstrap(mustSchema(reflect.TypeFor[T]()), reflect.ValueOf(cand.cfg).Elem()), nil), Files: cand.sharedFiles()}, nil
}

// sharedFiles returns the digests a record carries: every file field's
// but the hostfile ones, whose content is each host's own (a listener's
// certificate), so a follower reads and judges its own file instead of
// comparing it with the publisher's.
func (c *candidate[T]) sharedFiles() map[string]string {
	if len(c.local) == 0 {
		return c.files
	}
	out := make(map[string]string, len(c.files))
	for p, d := range c.files {
		if !c.local[p] {
			out[p] = d
		}
	}
	return out
}

// publish writes cand to the channel as version held+1, naming the
// attempt's trigger and actor, and away, the content digest it takes out
// of service (a revert's; see Record.RolledBack).
func (r *Runtime[T]) publish(ctx context.Context, ch fleet.Channel, held uint64, cand *candidate[T], trigger Trigger, away string) (uint64, error) {
	return r.writeRecord(ctx, cand, trigger, func(rec fleet.Record) (uint64, error) {
		rec.RolledBack = away
		return ch.Publish(ctx, held, rec)
	},
		"the cluster channel could not be written, or did not confirm the write; the previous generation stays active here (if the write landed after all, this worker applies it like every other: status shows the cluster version, and a retry answers no-op)")
}

// writeRecord makes cand's record, naming the attempt's trigger and actor,
// and writes it with write. A channel's own *Error and the attempt's
// context error pass through; any other failure is cluster_unavailable
// with the message unavailable.
func (r *Runtime[T]) writeRecord(ctx context.Context, cand *candidate[T], trigger Trigger, write func(fleet.Record) (uint64, error), unavailable string) (uint64, error) {
	rec, err := r.recordOf(cand)
	if err != nil {
		return 0, err
	}
	rec.Trigger, rec.Actor = string(trigger), actorOf(ctx, trigger)
	v, err := write(rec)
	var e *Error
	switch {
	case err == nil:
		return v, nil
	case errors.As(err, &e):
		return 0, e
	case ctx.Err() != nil:
		return 0, ctx.Err()
	default:
		return 0, &Error{Reason: reasons.ClusterUnavailable, Message: unavailable, Err: err}
	}
}

// join starts a cluster worker at the cluster's current version. With
// restartopt.Restart.StartupPublish, a version that does not run here leaves the worker
// on local, numbered as that version until its first reload publishes it
// over it (publish).
func (r *Runtime[T]) join(ctx context.Context, ch fleet.Channel, local *candidate[T]) (v uint64, cand *candidate[T], publish bool, err error) {
	rec, err := r.recordOf(local)
	if err != nil {
		return 0, nil, false, err
	}
	rec.Trigger, rec.Actor = string(TriggerStartup), actorOf(ctx, TriggerStartup)
	offer, m, err := r.seedRecord(ctx, rec)
	if err != nil {
		return 0, nil, false, err
	}
	v, got, err := ch.Join(ctx, offer)
	if err != nil {
		return 0, nil, false, fmt.Errorf("reconf: joining the cluster: %w", err)
	}
	// A worker that joins at a rollback's or a revert's record refuses
	// the content it took out of service, as the fleet does.
	r.rolledBack = got.RolledBack
	r.joinedMark(v, got, rec, m)
	if bytes.Equal(got.Live, rec.Live) {
		return v, local, false, nil
	}
	cand, err = r.comp.compileRecord(ctx, local.data, got)
	if err == nil {
		err = checkFiles(got.Files, cand.files)
	}
	var e *Error
	switch {
	case err == nil:
		return v, cand, false, nil
	case r.o.startupPublish && errors.As(err, &e) && e.Reason.Outcome() == Invalid:
		r.o.logger.Warn("reconf: the cluster's version does not run here; starting on the local file, which the first reload publishes over it",
			"version", v, "reason", e.Reason)
		return v, local, true, nil
	default:
		return 0, nil, false, err
	}
}

func mergeClasses(a, b map[string]fieldClass) map[string]fieldClass {
	if len(a) == 0 {
		return b
	}
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// checkFiles refuses a cluster version whose referenced files differ here.
func checkFiles(want, have map[string]string) error {
	var probs []Problem
	for p, d := range want {
		if have[p] != d {
			probs = append(probs, Problem{Path: p, Detail: "the file's content differs from the publisher's"})
		}
	}
	if len(probs) == 0 {
		return nil
	}
	slices.SortFunc(probs, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	return &Error{Reason: reasons.DigestMismatch, Message: "a file this version names differs on this host; distribute the same file to every host", Problems: probs}
}
