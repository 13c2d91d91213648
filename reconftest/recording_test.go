package reconftest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recordingT is a fake testing.TB for fault injection into the kit: it
// records the failures the kit reports instead of failing the test, so a
// test can check that the kit catches a broken consumer. Everything else
// (TempDir, Cleanup, Logf) goes to the real test it embeds.
type recordingT struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingT) Helper() {}

func (r *recordingT) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }
func (r *recordingT) Error(args ...any)                 { r.record(fmt.Sprint(args...)) }

// Fatalf records like Errorf; the caller carries on, which the kit's
// helpers allow (they return after a fatal report).
func (r *recordingT) Fatalf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }
func (r *recordingT) Fatal(args ...any)                 { r.record(fmt.Sprint(args...)) }
func (r *recordingT) Fail()                             { r.record("Fail called") }
func (r *recordingT) Failed() bool                      { return len(r.failures()) > 0 }

func (r *recordingT) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, msg)
}

func (r *recordingT) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// reported reports whether a failure of check c was recorded.
func (r *recordingT) reported(c check) bool {
	for _, e := range r.failures() {
		if strings.Contains(e, "reconftest: "+string(c)+":") {
			return true
		}
	}
	return false
}
