package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
)

// tokenSet is the accepted tokens, as digests: the server never keeps a
// token it could leak through a comparison's timing or a memory dump of
// its state beyond what the caller gave it.
type tokenSet struct {
	sums  [][sha256.Size]byte
	names []string
	// key signs status page sessions: derived from every digest, so a new
	// token list ends every session.
	key [sha256.Size]byte
}

func newTokenSet(tokens []Token) (*tokenSet, error) {
	if len(tokens) == 0 {
		return nil, ErrTokenTooShort
	}
	set := &tokenSet{}
	all := sha256.New()
	for _, t := range tokens {
		v := t.Secret.Reveal()
		if v == "" {
			return nil, ErrTokenTooShort
		}
		if err := checkToken(v); err != nil {
			return nil, err
		}
		if t.Name != "" && !validTokenName(t.Name) {
			return nil, fmt.Errorf("admin: a token's name is at most %d of a-z, A-Z, 0-9, '.', '_', '-', '@'", maxTokenName)
		}
		sum := sha256.Sum256([]byte(v))
		set.sums = append(set.sums, sum)
		set.names = append(set.names, t.Name)
		all.Write(sum[:])
	}
	if len(set.sums) == 1 {
		set.key = set.sums[0] // as before named tokens: sessions survive an upgrade
	} else {
		copy(set.key[:], all.Sum(nil))
	}
	return set, nil
}

// match compares a presented token with every accepted one, in constant
// time and without an early exit, and returns the matching one's name.
func (t *tokenSet) match(cred string) (name string, ok bool) {
	if t == nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	for i := range t.sums {
		if subtle.ConstantTimeCompare(sum[:], t.sums[i][:]) == 1 {
			name, ok = t.names[i], true
		}
	}
	return name, ok
}
