package lifecycle

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The hand-over's lines (the hand-over line, the go-ahead line) reach a
// successor as inherited descriptors named in its environment: the
// descriptor's number, then, for some, ":" and more. passFile and
// inheritedFD are the two sides.

// passFile adds f to cmd's inherited files, cmd not yet started, and sets
// name in its environment to f's descriptor number there, followed by
// suffix.
func passFile(cmd *exec.Cmd, f *os.File, name, suffix string) {
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = setEnv(env, name, strconv.Itoa(3+len(cmd.ExtraFiles))+suffix)
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
}

// inheritedFD reads the descriptor that name gives, if it is set, and
// unsets it, so that the processes this one starts do not inherit it by
// mistake. It returns the number (at least 3: not a standard stream) and
// what followed a ":" ("" for none); ok is false when name is unset or
// does not start with a number. The caller checks the descriptor is what
// it expects before it takes it.
func inheritedFD(lookup func(string) (string, bool), name string) (fd int, rest string, ok bool) {
	v, set := lookup(name)
	if !set {
		return 0, "", false
	}
	os.Unsetenv(name)
	fds, rest, _ := strings.Cut(v, ":")
	fd, err := strconv.Atoi(fds)
	if err != nil || fd < 3 {
		return 0, "", false
	}
	return fd, rest, true
}
