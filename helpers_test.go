package reconf

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBackend struct {
	Name    string        `yaml:"name" validate:"required"`
	Timeout time.Duration `yaml:"timeout" default:"30s" validate:"min=1ms"`
	Weight  int           `yaml:"weight" validate:"min=0,max=100"`
	APIKey  Secret        `yaml:"api_key"`
}

type testConfig struct {
	Server struct {
		Address string `yaml:"address" default:"127.0.0.1:8080" env:"TEST_SERVER_ADDRESS"`
		Workers int    `yaml:"workers" default:"1" validate:"min=1"`
	} `yaml:"server" reconf:"restart"`
	Logging struct {
		Level string `yaml:"level" default:"info" validate:"oneof=debug info warn error" env:"TEST_LOG_LEVEL"`
	} `yaml:"logging" reconf:"restart"`
	Routing struct {
		DefaultRoute string `yaml:"default_route" validate:"required"`
		MaxAttempts  int    `yaml:"max_attempts" default:"2" validate:"min=1,max=10" env:"TEST_MAX_ATTEMPTS"`
		A            int    `yaml:"a"`
		B            int    `yaml:"b"`
	} `yaml:"routing" reconf:"live"`
	Backends []testBackend     `yaml:"backends" reconf:"live"`
	Aliases  map[string]string `yaml:"model_aliases" reconf:"live"`
	// Count is derived from Backends by Normalize.
	Count int `yaml:"-" reconf:"derived"`
}

func (c *testConfig) Normalize() { c.Count = len(c.Backends) }

func (c *testConfig) hasBackend(name string) bool {
	for _, b := range c.Backends {
		if b.Name == name {
			return true
		}
	}
	return false
}

func (c *testConfig) Validate() error {
	var errs []error
	if !c.hasBackend(c.Routing.DefaultRoute) {
		errs = append(errs, FieldErrorf("routing.default_route", "must name a backend"))
	}
	for alias, target := range c.Aliases {
		if !c.hasBackend(target) {
			errs = append(errs, FieldErrorf("model_aliases["+safeSegment(alias)+"]", "must name a backend"))
		}
	}
	return errors.Join(errs...)
}

// baseYAML is a valid testConfig source; marker sets routing.a and routing.b.
func baseYAML(marker int) string {
	return fmt.Sprintf(`server:
  address: 127.0.0.1:8080
routing:
  default_route: stub
  a: %d
  b: %d
backends:
  - name: stub
    timeout: 5s
  - name: other
    weight: 3
model_aliases:
  gpt-4o-mini: stub
`, marker, marker)
}

// memSource is an in-memory Source the test can change between attempts.
type memSource struct {
	mu    sync.Mutex
	data  []byte
	err   error
	reads int
	block chan struct{} // when set, Read waits for it (or ctx)
}

func newMem(s string) *memSource { return &memSource{data: []byte(s)} }

func (m *memSource) set(s string) {
	m.mu.Lock()
	m.data, m.err = []byte(s), nil
	m.mu.Unlock()
}

func (m *memSource) Read(ctx context.Context, req ReadRequest) (Snapshot, error) {
	m.mu.Lock()
	block := m.block
	m.reads++
	data, err := m.data, m.err
	m.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
	if err != nil {
		return Snapshot{}, err
	}
	if int64(len(data)) > req.MaxBytes {
		return Snapshot{}, Errorf(ReasonSourceOversize, "too big")
	}
	return Snapshot{Data: data}, nil
}

func (m *memSource) Describe() string { return "memory" }

func noEnv(string) (string, bool) { return "", false }

// newTestRuntime builds a runtime over src with the mutation check on and
// no environment, and closes it when the test ends.
func newTestRuntime(t testing.TB, src Source, opts ...Option) *Runtime[testConfig] {
	t.Helper()
	all := append([]Option{
		WithEnv(noEnv),
		WithLogger(discardLogger()),
		WithMutationObserver(func(m Mutation) { t.Errorf("generation %d was modified at %v", m.Generation, m.Paths) }),
	}, opts...)
	rt, err := New[testConfig](context.Background(), src, all...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt
}

func mustReload(t testing.TB, rt *Runtime[testConfig], want Outcome) Result {
	t.Helper()
	res, err := rt.Reload(context.Background(), TriggerSDK)
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if res.Outcome != want {
		t.Fatalf("outcome = %s (%s: %s), want %s", res.Outcome, res.Reason, res.Message, want)
	}
	return res
}

// attemptLog records every attempt's result but a dry run's, as a history
// does, and reads them newest first.
type attemptLog struct {
	mu sync.Mutex
	rs []Result
}

func (l *attemptLog) Observe(res Result) {
	if res.DryRun {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rs = append(l.rs, res)
}

func (l *attemptLog) results() []Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.rs)
	slices.Reverse(out)
	return out
}
