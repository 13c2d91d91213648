package reconf

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// fingerprintOf digests the encoding of the entries at or under paths (all
// bootstrap entries when paths is empty). It is safe to show: a digest of
// settings, and secrets enter it only as their own private digests.
func fingerprintOf(flat []entry, paths []string) string {
	h := sha256.New()
	for _, e := range flat {
		if len(paths) == 0 && !e.class.requiresRestart() {
			continue
		}
		if len(paths) > 0 && !underAny(e.path, paths) {
			continue
		}
		h.Write([]byte(e.path))
		h.Write([]byte{0})
		h.Write([]byte(e.val))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

func underAny(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == p || strings.HasPrefix(path, p) && (path[len(p)] == '.' || path[len(p)] == '[') {
			return true
		}
	}
	return false
}
