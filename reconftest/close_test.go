package reconftest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/source"
)

// TestCloseRuntimeReportsLeakedPin: a pin never released makes Close wait;
// CloseRuntime gives up at its deadline and says how many pins are held,
// and closes once the pin goes.
func TestCloseRuntimeReportsLeakedPin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	WriteConfig(t, path, configA)
	src, err := source.File(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := reconf.New[config](context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	pin := rt.Acquire()

	rec := &recordingT{TB: t}
	CloseRuntime(rec, rt, 10*time.Millisecond)
	got := rec.failures()
	if len(got) != 1 || !rec.reported(checkPinLeak) || !strings.Contains(got[0], "1 pin(s) still held") {
		t.Fatalf("failures = %q, want one pin-leak report naming 1 pin", got)
	}

	pin.Release()
	rec = &recordingT{TB: t}
	CloseRuntime(rec, rt, 10*time.Second)
	if got := rec.failures(); len(got) != 0 {
		t.Fatalf("closing with no pin held: %q", got)
	}
	if !rt.Status().Closed {
		t.Error("the runtime is not closed")
	}
}
