package reconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
)

// claims holds the process-wide resources claimed by runtimes.
var claims = struct {
	sync.Mutex
	m map[string]*claim
}{m: map[string]*claim{}}

type claim struct {
	fingerprint string
	holders     int
}

// claimResource claims the process-wide resource name with a fingerprint of the
// configuration that sets it up. A claim with the same fingerprint shares
// the resource; a different one fails with an error wrapping ErrOwnership.
// The returned release function is idempotent.
func claimResource(name, fingerprint string) (release func(), err error) {
	claims.Lock()
	defer claims.Unlock()
	if c, ok := claims.m[name]; ok {
		if c.fingerprint != fingerprint {
			return nil, fmt.Errorf("%w: %q is already configured by another runtime in this process with different settings; give both the same settings or let one of them own it", ErrOwnership, name)
		}
		c.holders++
	} else {
		claims.m[name] = &claim{fingerprint: fingerprint, holders: 1}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			claims.Lock()
			defer claims.Unlock()
			if c := claims.m[name]; c != nil {
				if c.holders--; c.holders == 0 {
					delete(claims.m, name)
				}
			}
		})
	}, nil
}

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
