package sdk

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binary is the reconfd built for this run; empty with -short.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		// Building reconfd and running processes is the whole point of this
		// module; every test skips itself without it.
		return m.Run()
	}
	// SDK_MATRIX_RECONFD runs the matrix against a reconfd built elsewhere
	// (a release, another checkout) instead of this repository's.
	if b := os.Getenv("SDK_MATRIX_RECONFD"); b != "" {
		binary = b
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "reconfd-sdk-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "reconfd")
	// Built with -race from the repository's own module (two levels up),
	// as the e2e suite builds it, so that a race the SDKs' traffic finds
	// in the gateway fails the test, and the build cache is shared.
	build := exec.Command("go", "build", "-race", "-o", binary, "./cmd/reconfd")
	build.Dir = filepath.Join("..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building reconfd:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
