//go:build unix

package handoff_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// ExampleStart hands a listening socket to a successor and lets the
// predecessor go: a client that connects after the predecessor stopped
// accepting is answered by the successor on the same address, so a
// restart refuses no connection. The successor here is this example's
// own binary in its "serve" mode (see childEnv), which inherits "http",
// says Ready, and answers each connection with its pid.
func ExampleStart() {
	ln, err := handoff.Listen("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	set := handoff.NewSet()
	defer set.Close()
	if err := set.Add("http", ln); err != nil {
		log.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=serve")
	stdin, err := cmd.StdinPipe() // the successor exits when it closes
	if err != nil {
		log.Fatal(err)
	}
	p, err := handoff.Start(cmd, set)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { stdin.Close(); <-p.Exited() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.WaitReady(ctx); err != nil {
		p.Kill() // the successor failed: the predecessor would keep serving
		log.Fatal(err)
	}
	ln.Close() // the predecessor stops accepting; the successor holds the socket

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := bufio.NewReader(conn).ReadString('\n')
	fmt.Println("answered by the successor:", err == nil && strings.TrimSpace(answer) == strconv.Itoa(p.PID()))
	// Output: answered by the successor: true
}
