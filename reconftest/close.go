package reconftest

import (
	"context"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
)

// CloseRuntime closes rt within timeout and reports on t (as an error, not
// fatal) when it cannot: a pin never released keeps its generation alive,
// and Close waits for it, so a test that leaked one would otherwise hang
// until the test binary's own timeout. The report gives the pins still
// held and the generations they keep. Use it in a cleanup:
//
//	t.Cleanup(func() { reconftest.CloseRuntime(t, rt, 5*time.Second) })
func CloseRuntime[T any](t testing.TB, rt *reconf.Runtime[T], timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		st := rt.Status()
		t.Errorf("reconftest: %s: the runtime did not close within %s: %d pin(s) still held, keeping %d generation(s) (the last active was %d); every Acquire needs one Release: %v",
			checkPinLeak, timeout, st.Pinned, st.RetainedGenerations, st.ActiveGeneration, err)
	}
}
