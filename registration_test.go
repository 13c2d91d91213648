package reconf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A typo in a consumer path used to switch the consumer off silently.
func TestNewRefusesUnknownRegistrationPaths(t *testing.T) {
	nop := ConsumerFunc[testConfig](func(context.Context, *testConfig, *testConfig) (Prepared, error) { return nil, nil })
	cases := []struct {
		name string
		opt  Option
		want []string // substrings of the error
	}{
		{"consumer typo", WithConsumer(Key[any]("db"), nop, "backend"), []string{`consumer "db"`, `"backend"`, "nearest: backends"}},
		{"nested typo", WithConsumer(Key[any]("db"), nop, "backends[stub].timout"), []string{`"backends[stub].timout"`, "backends[*].timeout"}},
		{"process-wide typo", WithProcessWide("loging.level"), []string{`WithProcessWide`, "logging.level"}},
		{"empty path", WithConsumer(Key[any]("db"), nop, ""), []string{`""`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New[testConfig](context.Background(), newMem(baseYAML(1)), WithEnv(noEnv), tc.opt)
			if !errors.Is(err, ErrUnknownPath) {
				t.Fatalf("New: got %v, want ErrUnknownPath", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestKnownRegistrationPathsAreAccepted(t *testing.T) {
	nop := ConsumerFunc[testConfig](func(context.Context, *testConfig, *testConfig) (Prepared, error) { return nil, nil })
	newTestRuntime(t, newMem(baseYAML(1)),
		WithConsumer(Key[any]("a"), nop, "backends", "backends[stub]", "backends[0].timeout", "routing.a", "model_aliases[gpt-4o-mini]"),
		WithProcessWide("logging.level", "server"))
}

func TestTypePath(t *testing.T) {
	for in, want := range map[string]string{
		"a":                 "a",
		"a[b].c":            "a[*].c",
		"a[b.c][3].d":       "a[*][*].d",
		"a[unterminated":    "a[unterminated",
		"models[gpt-4o].id": "models[*].id",
	} {
		if got := typePath(in); got != want {
			t.Errorf("typePath(%q) = %q, want %q", in, got, want)
		}
	}
}
