package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/gateway"
	"github.com/reconfhq/reconf/internal/millis"
	"github.com/reconfhq/reconf/internal/restartapi"
	"github.com/reconfhq/reconf/internal/restartopt"
)

// Inheritance is what a single process that a restart started takes from
// its predecessor.
type Inheritance struct {
	// Options continue the predecessor's generation numbering and its
	// history in the first load.
	Options []gateway.Option
	// Successor: a restart started this process and handed it its
	// history.
	Successor bool
	// Restarted: a restart started this process (it continues its
	// predecessor's numbering), whether or not the history came too.
	Restarted bool
	// history is what the predecessor handed on.
	history handedHistory
}

// Inherit reads what a predecessor handed this process through the
// environment (envGeneration, envHistory); nothing when none did. An
// error says the history could not be read: the process then starts a
// new one, and Options still continue the numbering.
func Inherit(lookup func(string) (string, bool)) (Inheritance, error) {
	var in Inheritance
	if v, _ := lookup(envGeneration); v != "" {
		// A successor continues its predecessor's numbering.
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			in.Options = append(in.Options, gateway.WithRuntimeOptions(restartopt.Option(restartopt.Restart{FirstGeneration: n + 1}).(reconf.Option)))
		}
		in.Restarted = true
	}
	path, _ := lookup(envHistory)
	if path == "" {
		return in, nil
	}
	// ... and its history.
	seed, h, err := readHistory(path)
	if err != nil {
		return in, err
	}
	in.Options = append(in.Options, gateway.WithHistorySeed(seed))
	in.history, in.Successor, in.Restarted = h, true, true
	return in, nil
}

// maxHandedHistory bounds the history file a successor reads.
const maxHandedHistory = 8 << 20

// handedHistory is what a predecessor hands on: its entries, oldest
// first, and the restart's own entry, which the successor completes.
type handedHistory struct {
	Entries []reconf.HistoryEntry `json:"entries"`
	Restart reconf.HistoryEntry   `json:"restart"`
	// Restarts are the predecessor's restart counts (RestartState.Counts).
	Restarts map[restartapi.Outcome]uint64 `json:"restarts,omitempty"`
	// RestartID names the restart that starts the successor.
	RestartID string `json:"restart_id,omitempty"`
}

// writeHistory writes g's history and the restart's entry to a new
// private file and returns its path.
func writeHistory(ctx context.Context, g *gateway.Gateway, restart reconf.HistoryEntry, id string, counts map[restartapi.Outcome]uint64) (string, error) {
	entries, err := g.History(ctx, 0)
	if err != nil {
		return "", err
	}
	entries = slices.Clone(entries)
	slices.Reverse(entries)
	b, err := json.Marshal(handedHistory{Entries: entries, Restart: restart, Restarts: counts, RestartID: id})
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "reconfd-history-*.json") // 0600
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), f.Close()
}

// readHistory reads a predecessor's history for gateway.WithHistorySeed:
// its entries, then the restart's, completed with its duration so far;
// and its restart counts.
func readHistory(path string) ([]reconf.HistoryEntry, handedHistory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, handedHistory{}, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, handedHistory{}, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxHandedHistory+1))
	if err != nil {
		return nil, handedHistory{}, err
	}
	if len(b) > maxHandedHistory {
		return nil, handedHistory{}, fmt.Errorf("%s is over %d bytes", path, maxHandedHistory)
	}
	var h handedHistory
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, handedHistory{}, err
	}
	h.Restart.DurationMS = millis.Of(time.Since(h.Restart.Time))
	h.Restart.Message += fmt.Sprintf("; pid %d took them", os.Getpid())
	return append(h.Entries, h.Restart), h, nil
}
