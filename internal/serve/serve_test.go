package serve

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reconfd, not the library, reads RECONF_MUTATION_CHECK.
func TestMutationModeFromEnv(t *testing.T) {
	for v, want := range map[string]reconf.MutationMode{"": reconf.MutationLog, "log": reconf.MutationLog, "panic": reconf.MutationPanic, "off": reconf.MutationOff} {
		got, err := mutationMode(func(k string) (string, bool) { return v, k == envMutationCheck })
		if err != nil || got != want {
			t.Errorf("%q: got %v, %v; want %v", v, got, err, want)
		}
	}
	if _, err := mutationMode(func(string) (string, bool) { return "loud", true }); err == nil {
		t.Error("an unknown mode was accepted")
	}
}
