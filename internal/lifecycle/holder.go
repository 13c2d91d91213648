package lifecycle

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Holder describes the process that holds a listening address, as far as
// /proc shows it (only processes of the same user are visible).
type Holder struct {
	PID     int
	Command string // its command line, shortened
}

// String renders the holder for an error message.
func (h Holder) String() string { return fmt.Sprintf("pid %d (%s)", h.PID, h.Command) }

// HolderOf finds the process listening on addr's port: among the
// processes that hold the socket (a supervisor and its workers share one),
// the one whose parent does not, which is the one that created it. ok is
// false when /proc does not tell (another user's process, not Linux).
func HolderOf(addr string) (h Holder, ok bool) {
	_, portStr, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || port == 0 {
		return Holder{}, false
	}
	inodes := listeningInodes(int(port))
	if len(inodes) == 0 {
		return Holder{}, false
	}
	holders := map[int]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			link, _ := os.Readlink(filepath.Join(dir, fd.Name()))
			if in, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(in, "]")] {
				holders[pid] = true
				break
			}
		}
	}
	best := 0
	for pid := range holders {
		if !holders[parentOf(pid)] && (best == 0 || pid < best) {
			best = pid
		}
	}
	if best == 0 {
		return Holder{}, false
	}
	return Holder{PID: best, Command: commandOf(best)}, true
}

// listeningInodes returns the inodes of TCP sockets listening on port.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		// Scanned line by line: a host with many sockets has a long table,
		// and memory stays one line whatever its length.
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (field 9)
			if len(fields) > 9 && fields[3] == "0A" && strings.HasSuffix(fields[1], want) {
				out[fields[9]] = true
			}
		}
		fh.Close()
	}
	return out
}

// readProc reads at most limit bytes of a file under /proc: enough for the
// fields read here, and bounded whatever the process put in its command
// line.
func readProc(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

func parentOf(pid int) int {
	b, err := readProc(fmt.Sprintf("/proc/%d/stat", pid), 4096)
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	rest := b[bytes.LastIndexByte(b, ')')+1:]
	fields := strings.Fields(string(rest))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// commandOf returns pid's command line, arguments joined by spaces, cut at
// 200 bytes.
func commandOf(pid int) string {
	b, _ := readProc(fmt.Sprintf("/proc/%d/cmdline", pid), 4096)
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		s = "unknown command"
	}
	return s
}
