//go:build linux

package child

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// parentEnv makes the re-executed test binary the harness stand-in: it
// starts a long sleep tied to itself, prints the sleep's pid and exits
// without stopping it.
const parentEnv = "RECONF_BENCH_CHILD_PARENT"

func TestMain(m *testing.M) {
	if os.Getenv(parentEnv) != "" {
		cmd := exec.Command("sleep", "60")
		DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A child outlives a harness that exits without stopping it only if it
// is not tied: the tied one is gone within moments of the harness.
func TestChildDiesWithTheHarness(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(self, "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	_ = parent.Wait()
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the stand-in said %q", line)
	}
	for range 100 {
		// The sleep was reparented: a zombie until its new parent reaps
		// it, so look at its state, not only whether it exists.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || zombie(b) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("the child %d outlived its harness by 5 s", pid)
}

// zombie reports whether a /proc/PID/stat line is of a process that has
// exited but is not reaped.
func zombie(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
