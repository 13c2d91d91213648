//go:build !unix

package embedded

import "os"

// alive is true where Start does not run (it refuses Windows): nothing is
// ever swept there.
func alive(int) bool { return true }

// appendFlags open the owners file to append a line (Start refuses
// Windows before it gets there).
const appendFlags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
