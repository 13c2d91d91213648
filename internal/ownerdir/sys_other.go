//go:build !unix

package ownerdir

import "os"

// alive is true where there is no cheap probe: nothing is ever swept
// there.
func alive(int) bool { return true }

// appendFlags open the owners file to append a line.
const appendFlags = os.O_WRONLY | os.O_CREATE | os.O_APPEND

// readFlags open the owners file to lock it in a sweep.
const readFlags = os.O_RDONLY

// lock takes no lock where there is no flock; nothing is swept there.
func lock(*os.File, bool) (bool, error) { return true, nil }

// renameGuarded has nothing to check where nothing is swept.
func renameGuarded(string) error { return nil }
