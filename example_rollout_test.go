package reconf_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reconfhq/reconf"
)

// rolloutEnds tells when a rollout ends (a RolloutObserver).
type rolloutEnds chan reconf.RolloutState

func (rolloutEnds) Observe(reconf.Result) {}

func (c rolloutEnds) ObserveRollout(ev reconf.RolloutEvent) {
	if ev.State.Done() {
		c <- ev.State
	}
}

// A service stages its own changes: a bad one rolls itself back on the
// failures its requests report, a good one is promoted step by step.
func ExampleRuntime_Stage() {
	ctx := context.Background()
	var file atomic.Value // what an operator writes
	file.Store([]byte("greeting: hello\n"))
	src := reconf.SourceFunc("example", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		return reconf.Snapshot{Data: file.Load().([]byte)}, nil
	})
	ended := make(rolloutEnds, 1)
	rt, err := reconf.New[Config](ctx, src, reconf.WithLogger(quiet), reconf.WithObserver(ended))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rt.Close(ctx)

	// The service: every request pins the generation its client is on
	// and reports how it went.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pin := rt.AcquireFor(fmt.Sprintf("client-%d", i%100))
			failed := pin.Config().Greeting == "oops" // what a bad change does
			rt.Recorder().Observe(pin.ID(), failed, time.Millisecond)
			pin.Release()
			if i%20 == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	// Steps of minutes in production; milliseconds here.
	canary, _ := reconf.Preset("canary_10_percent_20_minutes")
	canary.StepInterval, canary.FinalBake = 20*time.Millisecond, 20*time.Millisecond
	canary.Health.MinRequests = 5
	canary.NoData, canary.MaxExtensions = reconf.HoldForData, 0

	file.Store([]byte("greeting: oops\n"))
	res, _ := rt.Stage(ctx, reconf.TriggerSDK, canary)
	fmt.Println(res.Outcome, res.Reason, "candidate", res.Generation)
	st := <-ended
	fmt.Println(st.Phase, st.Reason, "active", rt.Current().ID(), rt.Current().Config().Greeting)

	// The file still holds the bad change: a reload does not bring it back.
	res, _ = rt.Reload(ctx, reconf.TriggerSDK)
	fmt.Println(res.Outcome, res.Reason)

	file.Store([]byte("greeting: bonjour\n"))
	res, _ = rt.Stage(ctx, reconf.TriggerSDK, canary)
	fmt.Println(res.Outcome, res.Reason, "candidate", res.Generation)
	st = <-ended
	fmt.Println(st.Phase, "active", rt.Current().ID(), rt.Current().Config().Greeting)
	// Output:
	// published rollout_started candidate 2
	// rolled_back failure_rate_above_baseline active 3 hello
	// invalid rolled_back_content
	// published rollout_started candidate 4
	// promoted active 4 bonjour
}
