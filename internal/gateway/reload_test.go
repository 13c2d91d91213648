package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

func stubConfig(tokens int, delay string) string {
	return fmt.Sprintf(`
routing: {default_route: stub}
backends:
  - {name: stub, kind: stub, model: stub-1, max_concurrency: 32, timeout: 10s, stub: {tokens: %d, token_delay: %s}}
model_aliases: {gpt-4o-mini: stub}
`, tokens, delay)
}

func TestStreamKeepsItsGenerationAcrossReloads(t *testing.T) {
	tg := startGateway(t, stubConfig(10, "30ms"))
	s := tg.stream("gpt-4o-mini")
	first, err := s.next()
	if err != nil || parseChunk(t, first).Gen != 1 {
		t.Fatalf("first chunk %q %v", first, err)
	}
	for i, tokens := range []int{2, 3} {
		if res := tg.reload(stubConfig(tokens, "0s")); res.Outcome != reconf.Published || res.Generation != uint64(i+2) {
			t.Fatalf("reload %d: %+v", i, res)
		}
	}
	r := tg.chat("gpt-4o-mini")
	if r.gen(t) != 3 || len(strings.Fields(completionText(t, r))) != 4+2 {
		t.Errorf("new request: generation %d text %q", r.gen(t), completionText(t, r))
	}
	if st := tg.rt.Status(); st.RetainedGenerations != 2 || st.Pinned != 1 {
		t.Errorf("while the stream runs: %d retained, %d pinned; want 2 and 1", st.RetainedGenerations, st.Pinned)
	}
	events := s.all(t)
	if events[len(events)-1] != "[DONE]" || len(events) != 12 {
		t.Fatalf("stream not whole: %d events", len(events))
	}
	for _, e := range events[:len(events)-1] {
		if g := parseChunk(t, e).Gen; g != 1 {
			t.Fatalf("a chunk of the old stream is on generation %d", g)
		}
	}
	waitFor(t, "generation 1 to retire", func() bool { return tg.rt.Status().RetainedGenerations == 1 })
}

// TestReloadHammer runs many reloads under concurrent traffic: no request
// fails, and every response is consistent with one generation.
func TestReloadHammer(t *testing.T) {
	if testing.Short() {
		t.Skip("hammer test")
	}
	cfgs := []string{stubConfig(3, "1ms"), stubConfig(5, "0s")}
	tg := startGateway(t, cfgs[0])
	// tokensOf[gen] is the answer length that generation must give.
	var tokensOf sync.Map
	tokensOf.Store(uint64(1), 3)

	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if (w+i)%3 == 0 {
					if err := checkStream(tg, &tokensOf); err != nil {
						failed.Add(1)
						t.Error(err)
					}
					continue
				}
				r := tg.chat("gpt-4o-mini")
				gen := r.gen(t)
				want, ok := tokensOf.Load(gen)
				if r.status != 200 || !ok || len(strings.Fields(completionText(t, r))) != want.(int)+3 {
					failed.Add(1)
					t.Errorf("generation %d: got %d %q", gen, r.status, r.body)
				}
			}
		})
	}
	for i := range 60 {
		next := i%2 + 1
		// Record what the next generation will serve before it exists.
		tokensOf.Store(uint64(i+2), []int{3, 5}[next%2])
		if res := tg.reload(cfgs[next%2]); res.Outcome != reconf.Published {
			t.Fatalf("reload %d: %+v", i, res)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() > 0 || sent.Load() < 100 {
		t.Errorf("%d of %d requests failed", failed.Load(), sent.Load())
	}
	waitFor(t, "old generations to retire", func() bool { return tg.rt.Status().RetainedGenerations == 1 })
}

func checkStream(tg *testGateway, tokensOf *sync.Map) error {
	req, _ := http.NewRequest("POST", tg.url+"/v1/chat/completions", strings.NewReader(chatBody("stub-1", true)))
	resp, err := tg.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	gen, _ := strconv.ParseUint(resp.Header.Get(GenerationHeader), 10, 64)
	want, _ := tokensOf.Load(gen)
	events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	if resp.StatusCode != 200 || want == nil || len(events) != want.(int)+3 || events[len(events)-1] != "data: [DONE]" {
		return fmt.Errorf("stream on generation %d: %d %d events", gen, resp.StatusCode, len(events))
	}
	for _, e := range events[:len(events)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(strings.TrimPrefix(e, "data: ")), &c); err != nil || c.Gen != gen {
			return fmt.Errorf("chunk %q is not on the header's generation %d", e, gen)
		}
	}
	return nil
}

// TestSecretCanary runs every flow with canary secrets (client keys, a
// literal one and one from the environment, and an upstream key) and
// searches every output for them: logs, responses, reload results, status,
// check reports and metrics.
func TestSecretCanary(t *testing.T) {
	const (
		clientLiteral = "CANARY-client-literal-4b1e"
		clientEnv     = "CANARY-client-env-9d2f"
		upstreamKey   = "CANARY-upstream-key-77c3"
	)
	env := func(name string) (string, bool) {
		switch name {
		case "CLIENT_KEY":
			return clientEnv, true
		case "UPSTREAM_KEY":
			return upstreamKey, true
		}
		return "", false
	}
	up := newFakeOpenAI(t, "a-different-key") // so the upstream refuses ours and echoes it
	cfg := fmt.Sprintf(`
auth:
  mode: api_keys
  api_keys: [%s, "${env:CLIENT_KEY}"]
routing: {default_route: stub, max_attempts: 2}
backends:
  - {name: stub, kind: stub, model: stub-1}
  - {name: up, kind: openai, model: m, host: %q, api_key: "${env:UPSTREAM_KEY}"}
model_aliases: {remote: up}
`, clientLiteral, up.host())
	tg := startGateway(t, cfg, WithEnv(env))
	var outputs []string
	keep := func(r response) { outputs = append(outputs, string(r.body), fmt.Sprint(r.header)) }

	keep(tg.chat("stub-1", "Authorization", "Bearer "+clientLiteral))
	keep(tg.chat("stub-1", "Authorization", "Bearer "+clientEnv))
	keep(tg.chat("stub-1", "Authorization", "Bearer wrong-"+clientLiteral))
	keep(tg.chat("remote", "Authorization", "Bearer "+clientEnv)) // upstream 401 echoing the key
	keep(tg.do("GET", "/v1/models", "", "Authorization", "Bearer "+clientEnv))
	s := tg.stream("remote", "Authorization", "Bearer "+clientEnv)
	b, _ := io.ReadAll(s.resp.Body)
	outputs = append(outputs, string(b))

	results := []reconf.Result{
		tg.reload(strings.Replace(cfg, "max_attempts: 2", "max_attempts: 3", 1)),                // published
		tg.reload(strings.Replace(cfg, "mode: api_keys", "mode: none", 1)),                      // invalid (keys without mode)
		tg.reload(strings.Replace(cfg, clientLiteral, clientLiteral+"-rotated", 1)),             // published
		tg.reload(strings.Replace(cfg, `"${env:CLIENT_KEY}"`, `"${env:MISSING_KEY}"`, 1)),       // unresolved
		tg.reload(strings.Replace(cfg, "model: m,", "model: m, system_prompt_file: /nope,", 1)), // preparation-failed
	}
	wantOutcomes := []reconf.Outcome{reconf.Published, reconf.Invalid, reconf.Published, reconf.Invalid, reconf.PreparationFailed}
	for i, res := range results {
		if res.Outcome != wantOutcomes[i] {
			t.Errorf("reload %d: got %v (%s), want %v", i, res.Outcome, res.Message, wantOutcomes[i])
		}
		j, _ := json.Marshal(res)
		outputs = append(outputs, string(j), res.Message, fmt.Sprintf("%+v", res))
	}
	st, _ := json.Marshal(tg.rt.Status())
	outputs = append(outputs, string(st), fmt.Sprintf("%+v", *tg.Config()), fmt.Sprintf("%#v", tg.Config().Auth))

	path := filepath.Join(t.TempDir(), "c.yaml")
	writeAtomic(t, path, strings.Replace(cfg, "default_route: stub", "default_route: nowhere", 1))
	rep, err := Check(context.Background(), path, tg.path, WithEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(rep)
	outputs = append(outputs, string(j))

	outputs = append(outputs, tg.logs.String())
	for i, o := range outputs {
		for _, canary := range []string{clientLiteral, clientEnv, upstreamKey, "CANARY"} {
			if strings.Contains(o, canary) {
				t.Errorf("output %d shows a secret (%s):\n%s", i, canary, o)
			}
		}
	}
	if up.last(t).auth != "Bearer "+upstreamKey {
		t.Errorf("the upstream key was not sent")
	}
}

func TestPromptFileUnreadableCauses(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		path string
		want error
	}{
		{filepath.Join(dir, "missing"), errPromptMissing},
		{dir, errPromptIrregular},
		{write("empty", []byte(" \n")), errPromptEmpty},
		{write("binary", []byte{0xff, 0xfe, 0x00}), errPromptText},
		{write("large", []byte(strings.Repeat("a", maxPromptBytes+1))), errPromptLarge},
	}
	for _, tc := range cases {
		if _, err := readPrompt(t.Context(), tc.path); err != tc.want {
			t.Errorf("%s: got %v, want %v", filepath.Base(tc.path), err, tc.want)
		}
	}
	if p, err := readPrompt(t.Context(), write("ok", []byte("Be brief.\n"))); err != nil || p != "Be brief." {
		t.Errorf("got %q %v", p, err)
	}
}
