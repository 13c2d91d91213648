package gateway

import "testing"

// BenchmarkEndpoints is BenchmarkProxy's gateway serving the other
// endpoints, non-streamed, against the same upstream (which answers a
// chat completion on every path: the passed-through endpoints do not read
// it, and /v1/messages translates it). Unlike chat completions, these
// allocate per request; docs/reconfd.md gives the figures.
//
//	go test -run '^$' -bench Endpoints -benchmem ./internal/gateway/
func BenchmarkEndpoints(b *testing.B) {
	g, chat, hdr := proxyGateway(b)
	for _, tc := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", chat},
		{"embeddings", "/v1/embeddings", `{"model":"fast","input":"Say something short about configuration reloads."}`},
		{"responses", "/v1/responses", `{"model":"fast","input":"Say something short about configuration reloads."}`},
		{"messages", "/v1/messages", `{"model":"fast","max_tokens":64,"messages":[{"role":"user","content":"Say something short about configuration reloads."}]}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			do := handlerLoopAt(b, g.Handler(), tc.path, tc.body, hdr...)
			do()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				do()
			}
		})
	}
}
