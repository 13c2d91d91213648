// Package reconftest is a kit for the tests of code built on reconf.
//
// # Conformance of a consumer
//
// TestConsumer runs a reconf.Consumer through a real runtime over a real
// configuration file and reports every way it breaks the consumer
// contract, in the spirit of testing/slogtest: a consumer's author calls
// it from one test of their own.
//
//	func TestPoolsConform(t *testing.T) {
//		reconftest.TestConsumer(t, func(t testing.TB) reconftest.Subject[Config] {
//			p := newPools()
//			return reconftest.Subject[Config]{
//				Consumer: p,
//				Paths:    []string{"backends"},
//				State:    p.inService, // what only Commit may change
//				Open:     p.open,      // pools created and not yet closed
//			}
//		}, configA, configB)
//	}
//
// Each case starts a fresh subject and a fresh runtime, drives reloads,
// dry runs, refusals by a later consumer and pinned generations, and ends
// by closing the runtime with a deadline. It checks that
//
//   - Prepare changes nothing the rest of the process can see (State);
//   - a refused or dry-run attempt aborts what Prepare staged, leaves the
//     visible state and the active generation's value as they were, and
//     releases what Prepare created (Open);
//   - a published attempt commits once, and its value is the new
//     generation's; a Prepare that returns nil keeps the previous value;
//   - a retired generation's value is closed once, when the last pin on
//     it is released, and not before;
//   - Commit, Abort and Close do not panic or fail, the configuration is
//     not modified in place, and every Acquire made by Use is released;
//   - no goroutine started during a case outlives it (checked with
//     go.uber.org/goleak, which reconf already requires, so a consumer's
//     test needs no other module).
//
// The goroutine check sees every goroutine of the test binary: do not
// call TestConsumer from a parallel test.
//
// # Helpers
//
// WriteConfig replaces a configuration file the way an operator must (a
// temporary file renamed over the path), and CloseRuntime closes a
// runtime with a deadline, reporting the pins still held instead of
// hanging the test. RequireClassified fails a test when a field of the
// configuration type has no class.
package reconftest
