//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// run measures every mode in f.modes and returns the rows.
func run(f flags, w io.Writer) ([]row, error) {
	dir, err := os.MkdirTemp("", "bench-restart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	v1, err := build(dir, "v1")
	if err != nil {
		return nil, fmt.Errorf("build reconfd: %w", err)
	}
	v2, err := build(dir, "v2")
	if err != nil {
		return nil, fmt.Errorf("build reconfd: %w", err)
	}
	var rows []row
	var errs []error
	for _, mode := range strings.Split(f.modes, ",") {
		for _, fresh := range []bool{false, true} {
			sub, err := os.MkdirTemp(dir, mode+"-")
			if err != nil {
				return rows, err
			}
			fmt.Fprintf(w, "restart bench: %s, new connection per request %v\n", mode, fresh)
			r, err := runMode(mode, sub, v1, v2, f, fresh, w)
			if errors.Is(err, exec.ErrNotFound) {
				fmt.Fprintf(w, "restart bench: %s left out: nginx is not on PATH\n", mode)
				break
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", mode, err))
				continue
			}
			rows = append(rows, r)
		}
	}
	return rows, errors.Join(errs...)
}

func runMode(mode, dir, v1, v2 string, f flags, fresh bool, w io.Writer) (row, error) {
	switch mode {
	case "workers4", "workers1", "upgrade", "upgrade4":
		workers := 1
		if mode == "workers4" || mode == "upgrade4" {
			workers = 4
		}
		r, err := startReconfd(dir, v1, workers)
		if err != nil {
			return row{}, err
		}
		defer r.stop()
		if mode == "upgrade4" {
			defer func() {
				fmt.Fprintf(w, "restart bench: %s: the embedded channel was down (ms) %v\n", mode, r.channelDown())
			}()
		}
		next := []string{v2, v1}
		n := 0
		return measure(mode, r.url, f, fresh, func() (time.Duration, error) {
			version := ""
			if strings.HasPrefix(mode, "upgrade") {
				src := next[n%2]
				n++
				if err := install(src, r.exe); err != nil {
					return 0, err
				}
				version = []string{"v2", "v1"}[(n-1)%2]
			}
			var res restartResult
			var err error
			for range 50 { // busy while the previous roll's old workers drain
				if res, err = r.restart(); err == nil || !strings.Contains(err.Error(), `"busy"`) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				return 0, err
			}
			if mode == "upgrade4" && res.NewSupervisorPID == 0 {
				return 0, fmt.Errorf("a fleet upgrade kept its supervisor: %+v", res)
			}
			if version != "" {
				for _, pid := range res.NewPIDs {
					if err := r.serving(pid, version); err != nil {
						return 0, err
					}
				}
			}
			return time.Duration(res.DurationMS * float64(time.Millisecond)), nil
		})
	case "nginx-reload", "nginx-upgrade":
		up, stopUp, err := upstream()
		if err != nil {
			return row{}, err
		}
		defer stopUp()
		n, err := startNginx(dir, up)
		if err != nil {
			return row{}, err
		}
		defer n.stop()
		act := n.reload
		if mode == "nginx-upgrade" {
			act = n.upgrade
		}
		return measure(mode, n.url, f, fresh, act)
	}
	return row{}, fmt.Errorf("unknown mode %q", mode)
}
