// Command burst fires a stream of reload triggers at a runtime whose
// attempts take a while, and reports how many attempts ran: a burst folds
// into one queued attempt behind the running one, so at most two attempts
// start per attempt duration, and the last ends on the newest content.
//
//	cd bench && go run ./burst                       # 500 triggers over 10 s, 100 ms attempts
//	go run ./burst -triggers 500 -over 10s -attempt 100ms
//
// It prints one JSON line: triggers, attempts, folds (their sum is the
// triggers), busy answers (none: a reload folds instead), the most
// attempts that started within any window of one attempt duration, and
// whether the last generation holds the newest write.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reconfhq/reconf"
)

// config is what the runtime holds: a counter each trigger's write bumps.
type config struct {
	Write int `yaml:"write" reconf:"live"`
}

// result is the JSON line.
type result struct {
	Triggers         int     `json:"triggers"`
	OverS            float64 `json:"over_s"`
	AttemptMS        float64 `json:"attempt_ms"`
	Attempts         int     `json:"attempts"`
	Folds            int     `json:"folds"`
	Busy             int     `json:"busy"`
	MaxPerAttempt    int     `json:"max_attempts_started_per_attempt_duration"`
	NewestWrite      int     `json:"newest_write"`
	FinalWrite       int     `json:"final_write"`
	EndsOnNewest     bool    `json:"ends_on_newest"`
	WallS            float64 `json:"wall_s"`
	AttemptsWithFold int     `json:"attempts_with_folds"`
}

func main() {
	var (
		triggers = flag.Int("triggers", 500, "reload triggers")
		over     = flag.Duration("over", 10*time.Second, "spread evenly over this long")
		attempt  = flag.Duration("attempt", 100*time.Millisecond, "how long a consumer's prepare takes (the attempt's duration)")
	)
	flag.Parse()
	res, err := run(*triggers, *over, *attempt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "burst:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

func run(triggers int, over, attempt time.Duration) (result, error) {
	var write atomic.Int64
	src := reconf.SourceFunc("burst", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		return reconf.Snapshot{Data: fmt.Appendf(nil, "write: %d\n", write.Load())}, nil
	})
	slow := reconf.ConsumerFunc[config](func(ctx context.Context, prev, next *config) (reconf.Prepared, error) {
		if prev != nil {
			select {
			case <-time.After(attempt):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	})
	var (
		mu     sync.Mutex
		starts []time.Time
		folds  int
		folded int
	)
	obs := reconf.ObserverFunc(func(r reconf.Result) {
		if r.Trigger != reconf.TriggerAPI || r.Outcome == reconf.Busy {
			return
		}
		mu.Lock()
		starts = append(starts, r.Started)
		folds += r.Folds
		if r.Folds > 0 {
			folded++
		}
		mu.Unlock()
	})
	ctx := context.Background()
	rt, err := reconf.New[config](ctx, src, reconf.WithConsumer(reconf.Key[any]("slow"), slow), reconf.WithObserver(obs),
		reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return result{}, err
	}
	defer rt.Close(ctx) //nolint:errcheck // the harness ends here

	var wg sync.WaitGroup
	var busy atomic.Int64
	began := time.Now()
	for i := range triggers {
		time.Sleep(time.Until(began.Add(over * time.Duration(i) / time.Duration(triggers))))
		write.Store(int64(i + 1))
		wg.Go(func() {
			if res, err := rt.Reload(ctx, reconf.TriggerAPI); err == nil && res.Outcome == reconf.Busy {
				busy.Add(1)
			}
		})
	}
	wg.Wait()
	wall := time.Since(began)

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	most := 0
	for i := range starts {
		n := sort.Search(len(starts), func(j int) bool { return !starts[j].Before(starts[i].Add(attempt)) }) - i
		most = max(most, n)
	}
	final := rt.Current().Config().Write
	return result{
		Triggers: triggers, OverS: over.Seconds(), AttemptMS: float64(attempt.Microseconds()) / 1000,
		Attempts: len(starts), Folds: folds, Busy: int(busy.Load()), MaxPerAttempt: most,
		NewestWrite: int(write.Load()), FinalWrite: final, EndsOnNewest: final == int(write.Load()),
		WallS: wall.Seconds(), AttemptsWithFold: folded,
	}, nil
}
