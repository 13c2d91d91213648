// Package gateway is reconfd: an OpenAI-compatible LLM gateway whose
// routing, backends, aliases, limits and client keys follow a reconf
// runtime. cmd/reconfd is a thin shell over it; tests use it in-process.
//
//	g, err := gateway.New(ctx, "config.yaml")
//	if err != nil {
//		return err // a *reconf.Error (with problems) or *reconf.ConsumerError
//	}
//	ln, err := g.Listen() // server.address
//	go g.Serve(ln)
//	res, err := g.Reload(ctx, reconf.TriggerSDK)
//	err = g.Shutdown(ctx) // drain the data plane, then close the runtime
//
// # Generations
//
// Every data-plane request calls Runtime.Acquire on arrival and releases
// the pin when its handler returns, after the last byte of the answer,
// retries and streams included. Everything the request uses comes from the
// pinned generation: its configuration and its routing state, read with
// pin.Value(ConsumerName). Every response carries the generation in the
// Reconf-Generation header; the stub puts it in each streamed chunk too.
//
// # Transactions
//
// One consumer, registered as ConsumerName for every live section, builds
// a generation's whole routing state in Prepare: a route per backend (the
// stub, or an openai client), the alias table, the client keys' digests,
// the body limit and the attempt budget. Prepare has no visible effect but
// one (below): it reads system prompt files (a failure makes the attempt
// preparation-failed), makes HTTP clients for new or re-hosted openai
// backends, and takes a reference on the client of every openai backend
// that keeps its name and host. Abort drops those references. Commit sets
// the new concurrency limits on every backend's limiter and records the
// state as the base of the next Prepare. A backend that the committed
// state does not have gets its limit in Prepare instead, because the new
// generation serves from publication, before Commit; Abort puts its
// previous limit back. The state is the consumer's Valuer value, an
// io.Closer: the runtime closes it when the last generation holding it
// retires, which drops its client references; a client whose last
// reference goes closes its idle connections.
//
// # Concurrency
//
// A backend's limiter is a *gate.Limiter kept by name for the life of the
// gateway, so requests of every generation share its slots and a reload
// changes the limit in place, including from unlimited to limited and
// back. A single process makes local limiters (gate.NewLimiter); a worker
// of a cluster (WithCluster) takes them from its gate.Gate, so that
// max_concurrency holds across the fleet. A request acquires a slot before
// calling its backend and releases it when its handler returns, after the
// last byte: past the backend's timeout it is answered 429, and if the
// worker's gate has closed, 503. Waiters are served in arrival order and
// leave the line when their context ends. The routing state is immutable
// once built. Locks are never nested: backendsConsumer.mu guards the
// committed state pointer, localLimiters.mu its map; package gate keeps
// its own lock order.
package gateway
