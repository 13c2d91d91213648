//go:build linux

package main

import (
	"fmt"
	"strings"
)

// keyEnv names the environment variable that holds the i-th of a
// configuration's keys (a literal secret in a file is refused).
func keyEnv(i int) string { return fmt.Sprintf("BENCH_CLIENT_KEY_%02d", i) }

// confMaker makes a reconfd configuration for a listen address, a number
// of workers and an upstream URL, and names the client keys it accepts
// when the clients are to take more than one in turn (nil: clientKey).
type confMaker func(addr string, workers int, upstream string) (string, []string)

// plainConf is the acceptance configuration, reconfdConf.
func plainConf(addr string, workers int, upstream string) (string, []string) {
	return fmt.Sprintf(reconfdConf, addr, workers, upstream), nil
}

// rolloutKeys is how many client keys -rollout's clients take in turn:
// the split is by key, and with many keys each generation gets about its
// share of the requests.
const rolloutKeys = 64

// rolloutStrategy holds a candidate at 50% for longer than any run: its
// first step is judged after an hour.
const rolloutStrategy = "half"

// keysConf is reconfdConf with rolloutKeys client keys and a strategy
// that holds at 50%, for both sides of -rollout: with it, the only
// difference between them is whether a rollout is in progress.
func keysConf(addr string, workers int, upstream string) (string, []string) {
	keys := make([]string, rolloutKeys)
	var list strings.Builder
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-client-key-%02d-0123456789abcdef", i)
		fmt.Fprintf(&list, "    - ${env:%s}\n", keyEnv(i))
	}
	conf := fmt.Sprintf(reconfdConf, addr, workers, upstream)
	conf = strings.Replace(conf, "    - ${env:BENCH_CLIENT_KEY}\n", list.String(), 1)
	conf = strings.Replace(conf, "model_aliases:\n", `rollout:
  strategies:
    - name: `+rolloutStrategy+`
      growth: linear
      growth_factor: 50
      step_interval: 1h
      no_data: hold
model_aliases:
`, 1)
	return conf, keys
}

// routingConf is -routing's configuration: the model is one of
// routing.models with a fallback chain (a second backend on the same
// upstream, never needed) and the client key in auth.keys with limits far
// above any load the harness offers, so that both are consulted on every
// request and never change its answer.
func routingConf(addr string, workers int, upstream string) (string, []string) {
	return fmt.Sprintf(`server:
  address: %s
  workers: %d
logging:
  level: warn
auth:
  mode: api_keys
  keys:
    - name: bench
      secret: ${env:BENCH_CLIENT_KEY}
      limits: {requests: 1000000000, tokens: 1000000000000, per: 1m}
limits:
  max_request_body_bytes: 1048576
routing:
  default_route: up
  max_attempts: 2
  models:
    - name: fast
      deployments: [{backend: up}]
      fallbacks: [spare]
backends:
  - name: up
    kind: openai
    host: %s/v1
    model: bench-1
    max_concurrency: 256
    timeout: 30s
  - name: spare
    kind: openai
    host: %s/v1
    model: bench-1
    max_concurrency: 256
    timeout: 30s
`, addr, workers, upstream, upstream), nil
}
