package propagate_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/propagate/embedded"
)

type Config struct {
	Listen   string `yaml:"listen" reconf:"restart"`
	Greeting string `yaml:"greeting" reconf:"live"`
}

// Two workers of one host share an embedded etcd; a reload on one becomes
// the other's generation under the same number.
func Example() {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	member, err := embedded.Start(ctx, embedded.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer member.Close()

	file := map[string]string{}
	worker := func(id string) (*reconf.Runtime[Config], func()) {
		cli, _ := propagate.Connect(member.Endpoints(), quiet)
		ch, _ := propagate.NewChannel(cli, "/reconf/example", propagate.WithWorkerID(id))
		src := reconf.SourceFunc(id, func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
			return reconf.Snapshot{Data: []byte(file[id])}, nil
		})
		file[id] = "listen: :8080\ngreeting: hello\n"
		rt, err := reconf.New[Config](ctx, src, ch.Option(), reconf.WithLogger(quiet))
		if err != nil {
			panic(err)
		}
		f, _ := propagate.Follow(ctx, ch, rt, propagate.WithLogger(quiet))
		return rt, func() { f.Close(ctx); rt.Close(ctx); cli.Close() }
	}
	a, closeA := worker("a")
	defer closeA()
	b, closeB := worker("b")
	defer closeB()

	file["a"] = "listen: :8080\ngreeting: bonjour\n"
	res, _ := a.Reload(ctx, reconf.TriggerSDK)
	fmt.Println("a:", res.Outcome, "generation", res.Generation)
	for b.Current().ID() != res.Generation {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("b:", b.Current().Config().Greeting, "generation", b.Current().ID())
	// Output:
	// a: published generation 2
	// b: bonjour generation 2
}
