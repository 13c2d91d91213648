// Package metrics exports a reconf runtime's attempts and state as
// Prometheus metrics. It works with any runtime: passed to
// reconf.WithObserver, a Metrics receives every attempt, and New binds it
// to the runtime's Status, read at scrape time. There is no second step.
//
//	m := metrics.New("reconf")
//	rt, err := reconf.New[Config](ctx, src, reconf.WithObserver(m))
//	if err != nil {
//		return err
//	}
//	registry.MustRegister(m)
//
// # Metrics
//
// With namespace "reconf":
//
//	reconf_attempts_total{outcome,reason,trigger}      counter
//	reconf_attempt_duration_seconds{outcome}           histogram
//	reconf_active_generation                           gauge
//	reconf_last_success_timestamp_seconds              gauge
//	reconf_last_failure_timestamp_seconds              gauge
//	reconf_retained_generations                        gauge
//	reconf_retention_budget                            gauge
//	reconf_retention_pressure                          gauge (0 or 1)
//	reconf_pinned_units                                gauge
//	reconf_busy                                        gauge (0 or 1)
//	reconf_mutations_detected_total                    counter
//
// The counter and the histogram are fed by Observe. Every attempt counts,
// including busy refusals, dry runs (trigger "check") and the startup load
// (trigger "startup"); busy refusals that never ran are left out of the
// histogram, since their duration says nothing. The gauges are read from
// the bound Status function at scrape time (absent while none is bound:
// reconf.New binds it when it returns); the timestamps are absent until the first success or failure.
//
// # Labels
//
// Label values are codes, never content: outcome is the outcome's public
// name, reason is one of reconf's stable reasons (any reason reconf does not
// define is reported as "other", so a misbehaving source cannot put text in
// a label), and trigger is the trigger label the service chose ("sighup",
// "api", "sdk", ...) or "other" when it is not a short lower-case code.
// Secrets never reach a metric: nothing is read from the configuration.
//
// # Concurrency
//
// A Metrics is safe for concurrent use: Observe may run on the runtime's
// attempt goroutine while a scrape calls Collect, and BindStatus may be
// called at any time.
package metrics
