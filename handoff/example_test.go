package handoff_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/reconfhq/reconf/handoff"
)

// Example shows a service that restarts itself without closing its socket:
// the first process listens, a restart starts a successor with the socket,
// waits until it is ready, then drains and exits.
func Example() {
	lns, err := handoff.Inherited() // the predecessor's sockets, if any
	if err != nil {
		log.Fatal(err)
	}
	ln := lns["http"]
	if ln == nil { // the first process
		if ln, err = handoff.Listen("127.0.0.1:8080"); err != nil {
			log.Fatal(err) // EADDRINUSE: another instance holds the address
		}
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(ln)
	_ = handoff.Ready("")     // tell the predecessor, if there is one
	_ = handoff.NotifyReady() // and systemd, if it started the service

	restart := func() error {
		set := handoff.NewSet()
		defer set.Close()
		if err := set.Add("http", ln); err != nil {
			return err
		}
		exe, _ := os.Executable()
		cmd := exec.Command(exe, os.Args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		p, err := handoff.Start(cmd, set)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := p.WaitReady(ctx); err != nil {
			p.Kill() // the successor failed: this process keeps serving
			return err
		}
		// The successor serves: finish what this process has, then exit.
		return handoff.Drain(ctx, srv.Shutdown)
	}
	_ = restart
}
