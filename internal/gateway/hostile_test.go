//go:build unix

package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/internal/testkit"
)

// TestHostileReferencedFiles: a system prompt file or an api_key file that
// is a FIFO, a device or a /proc file is refused at once as invalid, at
// start and on reload; the gateway keeps serving its generation and the
// next reload is not busy. With os.ReadFile the FIFO wedged the attempt
// and /dev/zero exhausted memory.
func TestHostileReferencedFiles(t *testing.T) {
	up := newFakeOpenAI(t, goodKey)
	dir := t.TempDir()
	fifo, zero := testkit.HostileFiles(t, dir)
	targets := []string{fifo, zero}
	if _, err := os.Stat("/proc/self/environ"); err == nil {
		targets = append(targets, "/proc/self/environ")
	}
	good := upstreamConfig(up.host(), "")
	tg := startGateway(t, good, WithEnv(envWith(goodKey)))
	for _, target := range targets {
		for _, cfg := range []string{
			upstreamConfig(up.host(), "    system_prompt_file: "+target),
			strings.Replace(good, "${env:UPSTREAM_KEY}", "${file:"+target+"}", 1),
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			writeAtomic(t, tg.path, cfg)
			res, err := tg.Reload(ctx, reconf.TriggerSDK)
			cancel()
			if err != nil {
				t.Fatalf("%s: the reload did not answer: %v", target, err)
			}
			if res.Outcome != reconf.Invalid || res.Reason != reasons.FileNotRegular || res.Generation != 1 {
				t.Fatalf("%s: got %s (%s: %s) generation %d, want invalid (file_not_regular) on 1", target, res.Outcome, res.Reason, res.Message, res.Generation)
			}
			if r := tg.chat("gpt-4o-mini"); r.status != 200 {
				t.Fatalf("%s: serving after the refusal: %d", target, r.status)
			}

			path := filepath.Join(t.TempDir(), "c.yaml")
			writeAtomic(t, path, cfg)
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			_, err = New(ctx, path, WithEnv(envWith(goodKey)))
			cancel()
			var e *reconf.Error
			if !errors.As(err, &e) || e.Reason != reasons.FileNotRegular {
				t.Fatalf("%s: New: got %v, want file_not_regular", target, err)
			}
		}
	}
	if res := tg.reload(good + "\n"); res.Outcome != reconf.NoOp {
		t.Fatalf("after the refusals: %s (%s)", res.Outcome, res.Reason)
	}
}
