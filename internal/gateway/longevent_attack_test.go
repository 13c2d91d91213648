package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A Responses stream's response.completed event repeats the whole output
// and the client's instructions, so it can outgrow what the gateway holds
// of one event and be passed on as it comes. Its usage is still charged
// to the key, wherever the upstream's writes cut the event, the usage
// key or its object included.
func TestLongEventUsageCharged(t *testing.T) {
	up := newPathUpstream(t)
	tg, key, charged := startChargedGateway(t, up, "")

	long := strings.Repeat("word ", 80<<10) // 400 KiB, over maxEventHold
	ev := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"instructions\":\"" + long +
		"\",\"output\":[{\"content\":[{\"text\":\"" + long + "\"}]}],\"usage\":{\"input_tokens\":7,\"output_tokens\":5,\"total_tokens\":12},\"user\":null}}\n\n"
	usage := strings.Index(ev, `"usage"`)
	for _, tc := range []struct {
		name string
		cut  int // where the upstream's last write starts; 0 for one write
	}{
		{"one write", 0},
		{"cut before the usage key", usage - 1},
		{"cut in the usage key", usage + 3},
		{"cut after the usage key", usage + len(`"usage":`)},
		{"cut in the usage object", usage + len(`"usage":{"input_tokens":7,`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.handle("/v1/responses", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				if tc.cut > 0 {
					io.WriteString(w, ev[:tc.cut])
					_ = rc.Flush()
					time.Sleep(50 * time.Millisecond)
				}
				io.WriteString(w, ev[tc.cut:])
				_ = rc.Flush()
			})
			before := charged()
			r := tg.do("POST", "/v1/responses", `{"model":"gpt-x","input":"hi","stream":true}`, key...)
			if r.status != 200 || string(r.body) != ev {
				t.Fatalf("got %d, %d bytes, want the upstream's %d", r.status, len(r.body), len(ev))
			}
			waitFor(t, "the stream's charge", func() bool { return charged()-before == 12 })
		})
	}
}
