package reconf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// expectKey carries the content a reload must find in the source.
type expectKey struct{}

// WithExpectedDigest returns a context whose reload acts only on exact
// content: digest is "sha256:" and the hex SHA-256 of the bytes the source
// must hold (for a file, the file's bytes). Before anything else, the
// attempt compares the source's digest with it; a mismatch is
// precondition-failed (source_digest_mismatch) and does nothing more. The
// answer never reveals the source's actual digest. A deploy pipeline uses
// it to reload what it just shipped rather than whatever the file holds
// when the reload lands (a Kubernetes volume brings a change a minute or
// two after it is applied); it retries on precondition-failed until the
// content arrives.
//
// A context value, not a Reload parameter: like WithActor it travels with
// the trigger (SIGHUP has none, the management API sets it from If-Match)
// and leaves Reload's signature alone. An invalid digest is an error.
func WithExpectedDigest(ctx context.Context, digest string) (context.Context, error) {
	d, err := parseContentDigest(digest)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, expectKey{}, d), nil
}

// ContentDigest returns the digest WithExpectedDigest takes for data:
// "sha256:" and its hex SHA-256.
func ContentDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func parseContentDigest(s string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	h, ok := strings.CutPrefix(s, "sha256:")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != sha256.Size {
		return d, errors.New(`reconf: an expected digest is "sha256:" and 64 hex digits`)
	}
	copy(d[:], b)
	return d, nil
}

// expectedDigest returns the digest ctx expects, if any.
func expectedDigest(ctx context.Context) ([sha256.Size]byte, bool) {
	d, ok := ctx.Value(expectKey{}).([sha256.Size]byte)
	return d, ok
}

// digestMismatch returns the precondition-failed error of data, or nil when it
// holds the content ctx expects (or ctx expects nothing).
func digestMismatch(ctx context.Context, data []byte) error {
	want, ok := expectedDigest(ctx)
	if !ok || sha256.Sum256(data) == want {
		return nil
	}
	return Errorf(ReasonSourceDigestMismatch, "the source does not hold the expected content yet; retry once it does (a Kubernetes volume brings a change a minute or two after it is applied)")
}
