//go:build unix

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/testkit"
)

// echoUpstream answers every completion with what reached it from one
// generation's three files: the model (from the configuration), the key
// (a ${file:} secret) and the system prompt (a digested prompt file).
func echoUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		system := ""
		for _, m := range req.Messages {
			if m.Role == "system" {
				system = m.Content
			}
		}
		content := strings.Join([]string{req.Model, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), system}, "|")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "c", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]string{"role": "assistant", "content": content}}}})
	}))
	t.Cleanup(up.Close)
	return up
}

// mountRevision is the ConfigMap-and-Secret payload of one revision: each
// of its three files carries the marker.
func mountRevision(dir, upstream, marker string) map[string]string {
	return map[string]string{
		"config.yaml": fmt.Sprintf(`server: {address: "127.0.0.1:0"}
routing: {default_route: up}
backends:
  - name: up
    kind: openai
    host: %q
    model: m-%s
    api_key: ${file:%s}
    system_prompt_file: %s
    max_concurrency: 64
    timeout: 10s
model_aliases: {x: up}
`, upstream, marker, filepath.Join(dir, "key"), filepath.Join(dir, "prompt")),
		"key":    "k-" + marker,
		"prompt": "p-" + marker,
	}
}

// TestKubernetesMountBurstNeverMixes swaps a mount holding the
// configuration, its secret and its prompt file in a burst, as the kubelet
// does, while reloads and requests run. Every answer's three markers come
// from one revision, and it is the revision history records for the
// generation that served it.
func TestKubernetesMountBurstNeverMixes(t *testing.T) {
	requireBinary(t)
	up := echoUpstream(t)
	dir := filepath.Join(t.TempDir(), "config")
	k := testkit.NewKubelet(t, dir, 0o440, mountRevision(dir, up.URL+"/v1", "0")) // a projected volume with a Secret: defaultMode 0440
	marker := map[string]string{k.Revision(): "0"}
	const token = "mount-test-management-token"
	s := startServerAt(t, filepath.Join(dir, "config.yaml"), []string{"--management-address", "127.0.0.1:0"},
		"RECONF_MANAGEMENT_TOKEN="+token)
	auth := []string{"Authorization", "Bearer " + token}

	const swaps = 40
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var mixed []string
	served := map[int]string{} // generation -> marker its answers carried
	outcomes := map[string]int{}
	wg.Add(2)
	go func() { // reloads until the burst ends
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			r := s.do("POST", "http://"+s.mgmt+"/admin/config/reload", "", auth...)
			var res reconf.Result
			_ = json.Unmarshal([]byte(r.body), &res)
			mu.Lock()
			outcomes[res.Outcome.String()+"/"+string(res.Reason)]++
			mu.Unlock()
		}
	}()
	go func() { // requests until the burst ends
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			r := s.chat("x")
			if r.status != http.StatusOK {
				continue
			}
			parts := strings.Split(text(t, r), "|")
			m := strings.TrimPrefix(parts[0], "m-")
			mu.Lock()
			if len(parts) != 3 || parts[1] != "k-"+m || parts[2] != "p-"+m {
				mixed = append(mixed, fmt.Sprintf("generation %d answered %q", r.gen(), parts))
			} else if prev, ok := served[r.gen()]; ok && prev != m {
				mixed = append(mixed, fmt.Sprintf("generation %d answered from %s and %s", r.gen(), prev, m))
			} else {
				served[r.gen()] = m
			}
			mu.Unlock()
		}
	}()
	for i := 1; i <= swaps; i++ {
		rev := k.Update(mountRevision(dir, up.URL+"/v1", fmt.Sprint(i)))
		marker[rev] = fmt.Sprint(i)
		time.Sleep(time.Duration(i%4) * 5 * time.Millisecond)
	}
	close(done)
	wg.Wait()

	for _, m := range mixed {
		t.Error(m)
	}
	var hist struct{ Entries []reconf.HistoryEntry }
	if err := json.Unmarshal([]byte(s.do("GET", "http://"+s.mgmt+"/admin/config/history?limit=256", "", auth...).body), &hist); err != nil {
		t.Fatal(err)
	}
	genMarker := map[uint64]string{}
	for _, e := range hist.Entries {
		if e.Outcome != "published" {
			continue
		}
		if len(e.Revisions) != 1 || e.Revisions[dir] == "" {
			t.Fatalf("generation %d records revisions %v, want one for %s", e.Generation, e.Revisions, dir)
		}
		genMarker[e.Generation] = marker[e.Revisions[dir]]
	}
	checked := 0
	for gen, m := range served {
		want, ok := genMarker[uint64(gen)]
		if !ok {
			continue // its entry left the history's window
		}
		checked++
		if want != m {
			t.Errorf("generation %d answered from revision %s; history records revision %s", gen, m, want)
		}
	}
	t.Logf("%d swaps, %d generations published, %d checked against history; reload outcomes %v", swaps, len(genMarker), checked, outcomes)
	if len(genMarker) < 3 || checked < 2 {
		t.Fatalf("the burst published %d generations and %d were served and checked: too few to judge", len(genMarker), checked)
	}
}
