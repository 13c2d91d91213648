//go:build unix

package lifecycle

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The successor's end of the hand-over line is taken only when the
// variable names a pipe (one inherited by mistake names whatever the
// process has at that number), and carries the words one a line.
func TestPredecessorLineTakesOnlyAPipe(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "not-a-pipe"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, v := range []string{"", "x", "1", strconv.Itoa(int(file.Fd()))} {
		if l := takePredecessorLine(func(string) (string, bool) { return v, true }); l != nil {
			t.Errorf("%s=%q gave a line", envHandedOnFD, v)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fd, err := unix.Dup(int(w.Fd())) // the line's own, as a successor has
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := takePredecessorLine(func(string) (string, bool) { return strconv.Itoa(fd), true })
	if l == nil {
		unix.Close(fd)
		t.Fatal("a pipe gave no line")
	}
	l.tell(wordHandedOver)
	l.tell(wordTookBack)
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the line is not kept from the processes this one starts (flags %#x, %v)", flags, err)
	}
	l.w.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != wordHandedOver+"\n"+wordTookBack+"\n" {
		t.Fatalf("read %q, %v", b, err)
	}
}
