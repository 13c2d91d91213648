package adminclient

import (
	"context"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/safefile"
	"net/http"
	"time"

	"github.com/reconfhq/reconf"
)

// expectRetry is the pause between two tries of a waiting reload: the
// kubelet delivers a change within a minute or two, so a second is fine
// grained enough, and each try reads the file once.
const expectRetry = time.Second

// Expect makes a reload exact: File (--expect) or Digest
// (--expect-digest) names the content, and Wait retries until it arrives.
type Expect struct {
	File, Digest string
	Wait         time.Duration
}

// IfMatch returns the If-Match header of the reload, or "" for a plain one.
func (x *Expect) IfMatch() (string, error) {
	switch {
	case x.File != "" && x.Digest != "":
		return "", exitcode.Usagef("--expect and --expect-digest exclude each other")
	case x.File != "":
		// The source is read under reconf's default bound, so a longer file
		// could never match; a FIFO or device is refused at once.
		data, err := safefile.ReadFile(context.Background(), x.File, reconf.DefaultMaxSourceBytes)
		if err != nil {
			return "", exitcode.Usagef("--expect: %v", err)
		}
		return `"` + reconf.ContentDigest(data) + `"`, nil
	case x.Digest != "":
		if _, err := reconf.WithExpectedDigest(context.Background(), x.Digest); err != nil {
			return "", exitcode.Usagef("--expect-digest: %v", err)
		}
		return `"` + x.Digest + `"`, nil
	case x.Wait > 0:
		return "", exitcode.Usagef("--wait needs --expect or --expect-digest")
	}
	return "", nil
}

// Retry calls call until it answers anything but a precondition failure or
// a busy runtime, or the wait ends; the last answer is returned. Any other
// refusal ends the wait at once.
func (x *Expect) Retry(ctx context.Context, call func() (int, []byte, error)) (int, []byte, error) {
	deadline := time.Now().Add(x.Wait)
	for {
		status, body, err := call()
		if err != nil || (status != http.StatusPreconditionFailed && status != http.StatusConflict) || x.Wait <= 0 {
			return status, body, err
		}
		if status == http.StatusConflict && !isBusy(body) {
			return status, body, err
		}
		if time.Now().Add(expectRetry).After(deadline) {
			return status, body, err
		}
		select {
		case <-ctx.Done():
			return status, body, err
		case <-time.After(expectRetry):
		}
	}
}

// isBusy reports whether a 409 answer is busy (another attempt in flight),
// which a waiting reload retries, rather than restart-required.
func isBusy(body []byte) bool {
	var res reconf.Result
	return res.UnmarshalJSON(body) == nil && res.Outcome == reconf.Busy
}
