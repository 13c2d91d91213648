//go:build unix

package lifecycle

import (
	"bufio"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/reconfhq/reconf/internal/testkit"
)

// A process that exits without serving hands a SIGHUP it held to its
// predecessor ("reload" on the hand-over line), logs it as dropped with
// ReasonReloadDropped when the predecessor is gone (the line is broken),
// and says nothing when no predecessor started it.
func TestHandOnReload(t *testing.T) {
	saved := predecessor
	defer func() { predecessor = saved }()
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	predecessor = &predecessorLine{w: w}
	HandOnReload(log)
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if err != nil || line != wordReload+"\n" {
		t.Fatalf("the predecessor read %q (%v), want %q", line, err, wordReload)
	}
	if strings.Contains(logs.String(), ReasonReloadDropped) {
		t.Fatalf("a reload handed on was logged as dropped:\n%s", logs)
	}

	r, w, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the predecessor is gone
	predecessor = &predecessorLine{w: w}
	HandOnReload(log)
	w.Close()
	if !strings.Contains(logs.String(), "reason="+ReasonReloadDropped) {
		t.Fatalf("a reload no one could take was not logged as dropped:\n%s", logs)
	}

	predecessor = nil
	n := len(logs.String())
	HandOnReload(log)
	if len(logs.String()) != n {
		t.Fatalf("a first process logged a reload to hand on:\n%s", logs.String()[n:])
	}
}
