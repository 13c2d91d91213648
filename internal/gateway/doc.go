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
// The data plane runs on fasthttp (docs/design/data-plane.md says why).
// A request's header and whole body are read first, bounded by the active
// generation's body limit (checked with Current, no pin) and by the body
// read timeout; a request whose key the active generation refuses is
// answered without its body being read. Only then does the request call
// Runtime.Acquire, check its key and body limit again under the pin, and
// serve. The pin is released after the last byte of the answer, retries
// included: when the handler returns, or, for a stream (which fasthttp
// writes after the handler returns), when the stream's body is closed.
// Everything the request uses comes from the pinned generation: its
// configuration and its routing state, read with routesKey.Get(pin).
// Every response carries the generation in the Reconf-Generation header;
// the stub puts it in each streamed chunk too.
//
// # Deadlines
//
// An admitted chat completion sets its connection's write deadline to its
// admission time plus the backend's timeout, the bound the contract puts
// on the whole answer: a client that stops reading loses its answer then,
// and the answer's end releases its gate slot and pin. An answer cut at
// the timeout (a 504, a stream's error event) gets one more second to be
// written. ServerTimeouts bound the header, the body, idle connections
// and other answers.
//
// # Transactions
//
// One consumer, registered under routesKey for every live section, builds
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
// calling its backend and releases it with its pin, after the last byte:
// if no slot frees within the backend's timeout it is answered 429, and if
// the worker's gate has closed, 503. Waiters are served in arrival order
// and leave the line at the timeout (fasthttp does not tell a handler that
// its client went away). The routing state is immutable
// once built. Locks are never nested: backendsConsumer.mu guards the
// committed state pointer, localLimiters.mu its map; package gate keeps
// its own lock order.
package gateway
