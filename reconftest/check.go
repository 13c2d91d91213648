package reconftest

// check names one rule of the consumer contract. Every failure the kit
// reports starts with "reconftest: <check>:", so a log search or a test
// of the kit can tell the rules apart.
type check string

const (
	checkSetup         check = "setup"   // the test's own inputs are unusable
	checkPublish       check = "publish" // a valid configuration did not publish
	checkSideEffect    check = "prepare-side-effect"
	checkAbortState    check = "abort-state"    // Abort left the visible state changed
	checkAbortLeak     check = "abort-leak"     // Abort left what Prepare created open
	checkCommit        check = "commit"         // a published change not committed once
	checkValue         check = "value"          // the generation's value is not the one staged or kept
	checkEarlyClose    check = "early-close"    // a value closed while a pin still held it
	checkRetire        check = "retire"         // a retired value not closed, or closed twice
	checkPinLeak       check = "pin-leak"       // a pin never released
	checkGoroutineLeak check = "goroutine-leak" // a goroutine outlived its case
	checkLogged        check = "logged"         // a panic, a failed Close or a mutation the runtime logged
)
