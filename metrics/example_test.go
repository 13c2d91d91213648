package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/metrics"
)

func Example() {
	type Config struct {
		Limit int `yaml:"limit" reconf:"live"`
	}
	ctx := context.Background()
	m := metrics.New("reconf")
	rt, err := reconf.New[Config](ctx, reconf.Bytes("example", []byte("limit: 1\n")),
		reconf.WithObserver(m),
		reconf.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	if _, err := rt.Reload(ctx, reconf.TriggerSDK); err != nil {
		panic(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "reconf_attempts_total":
			for _, s := range mf.GetMetric() {
				l := s.GetLabel()
				fmt.Printf("%s{%s=%s,%s=%s,%s=%s} %v\n", mf.GetName(), l[0].GetName(), l[0].GetValue(),
					l[1].GetName(), l[1].GetValue(), l[2].GetName(), l[2].GetValue(), s.GetCounter().GetValue())
			}
		case "reconf_active_generation":
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// reconf_active_generation 1
	// reconf_attempts_total{outcome=no-op,reason=unchanged,trigger=sdk} 1
	// reconf_attempts_total{outcome=published,reason=published,trigger=startup} 1
}
