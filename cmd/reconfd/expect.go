package main

import (
	"context"
	"github.com/reconfhq/reconf/internal/exitcode"
	"github.com/reconfhq/reconf/internal/safefile"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
)

// expectRetry is the pause between two tries of a waiting reload: the
// kubelet delivers a change within a minute or two, so a second is fine
// grained enough, and each try reads the file once.
const expectRetry = time.Second

// expectFlags make a reload exact: --expect FILE or --expect-digest, and
// --wait to retry until the content arrives.
type expectFlags struct {
	file, digest string
	wait         time.Duration
}

func (x *expectFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&x.file, "expect", "", "reload only if the source holds exactly this file's content (e.g. the rendered ConfigMap data)")
	cmd.Flags().StringVar(&x.digest, "expect-digest", "", "reload only if the source's content has this digest (sha256:HEX)")
	cmd.Flags().DurationVar(&x.wait, "wait", 0, "with --expect or --expect-digest: retry while the source does not hold the content yet, up to this long (e.g. 3m)")
}

// ifMatch returns the If-Match header of the reload, or "" for a plain one.
func (x *expectFlags) ifMatch() (string, error) {
	switch {
	case x.file != "" && x.digest != "":
		return "", exitcode.Usagef("--expect and --expect-digest exclude each other")
	case x.file != "":
		// The source is read under reconf's default bound, so a longer file
		// could never match; a FIFO or device is refused at once.
		data, err := safefile.ReadFile(context.Background(), x.file, reconf.DefaultMaxSourceBytes)
		if err != nil {
			return "", exitcode.Usagef("--expect: %v", err)
		}
		return `"` + reconf.ContentDigest(data) + `"`, nil
	case x.digest != "":
		if _, err := reconf.WithExpectedDigest(context.Background(), x.digest); err != nil {
			return "", exitcode.Usagef("--expect-digest: %v", err)
		}
		return `"` + x.digest + `"`, nil
	case x.wait > 0:
		return "", exitcode.Usagef("--wait needs --expect or --expect-digest")
	}
	return "", nil
}

// retry calls call until it answers anything but a precondition failure or
// a busy runtime, or the wait ends; the last answer is returned. Any other
// refusal ends the wait at once.
func (x *expectFlags) retry(ctx context.Context, call func() (int, []byte, error)) (int, []byte, error) {
	deadline := time.Now().Add(x.wait)
	for {
		status, body, err := call()
		if err != nil || (status != http.StatusPreconditionFailed && status != http.StatusConflict) || x.wait <= 0 {
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
