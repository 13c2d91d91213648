package lifecycle

import (
	"crypto/sha256"
	"errors"
	"io"
	"os"
)

// openImage opens the executable this process runs, once, at start:
// /proc/self/exe where the system has it, else the path os.Executable
// gave. An open descriptor keeps reaching the running image after a new
// build is renamed over the path, so a later comparison sees the
// replacement (without /proc, comparing the path with itself never did:
// every restart on macOS counted as an upgrade).
func openImage(exe string) (*os.File, error) {
	if f, err := os.Open("/proc/self/exe"); err == nil {
		return f, nil
	}
	return os.Open(exe)
}

// executableChanged reports whether the executable at path is another
// program than the running image: not the same file (device and inode),
// and not the same bytes either (a copy of the same build is no upgrade).
// A file that cannot be read counts as changed: the restart then starts
// it, and reports why it failed.
func executableChanged(image *os.File, path string) bool {
	if image == nil {
		return true
	}
	si, serr := image.Stat()
	pi, perr := os.Stat(path)
	if serr == nil && perr == nil && os.SameFile(si, pi) {
		return false
	}
	a, aerr := readerDigest(io.NewSectionReader(image, 0, 1<<62), si)
	b, berr := fileDigest(path)
	return serr != nil || aerr != nil || berr != nil || a != b
}

// fileDigest returns the SHA-256 of a regular file, read in a stream.
func fileDigest(path string) ([32]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return [32]byte{}, err
	}
	return readerDigest(f, st)
}

// readerDigest returns the SHA-256 of r, the content of the file st
// describes, which must be a regular one.
func readerDigest(r io.Reader, st os.FileInfo) ([32]byte, error) {
	var sum [32]byte
	if st == nil || !st.Mode().IsRegular() {
		return sum, errors.New("not a regular file")
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
