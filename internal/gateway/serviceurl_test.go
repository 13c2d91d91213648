package gateway

import "testing"

// A cluster endpoint (or collector) whose port no socket can have is
// refused when the file or flag is checked: before, a join to it waited
// out its 30 s and failed as cluster_unreachable.
func TestServiceURLPort(t *testing.T) {
	for ep, ok := range map[string]bool{
		"http://127.0.0.1:2379": true, "https://[::1]:2379": true, "HTTPS://[::1]:2379": true,
		"http://127.0.0.1:65535": true, "http://127.0.0.1:1": true,
		"http://127.0.0.1:0": false, "http://127.0.0.1:65536": false, "http://[::1]:99999": false,
		"http://127.0.0.1:02379": true,
	} {
		if msg := CheckClusterEndpoint(ep); (msg == "") != ok {
			t.Errorf("%s: %q, want accepted=%v", ep, msg, ok)
		}
	}
}
