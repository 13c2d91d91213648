package safefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Sentinel errors; a *NotRegularError wraps ErrNotRegular.
var (
	// ErrNotRegular: the path is not a regular file after symlinks.
	ErrNotRegular = errors.New("safefile: not a regular file")
	// ErrOversize: the file holds more bytes than the bound.
	ErrOversize = errors.New("safefile: file over the size bound")
)

// NotRegularError says what a refused path is instead of a regular file.
type NotRegularError struct {
	// Kind is a short description: "a named pipe (FIFO)", "a device", ...
	Kind string
}

func (e *NotRegularError) Error() string { return "the path is " + e.Kind + ", not a regular file" }

// Unwrap returns ErrNotRegular.
func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// chunk is how much is read between two context checks.
const chunk = 64 << 10

// File is an open regular file. It is not safe for concurrent use.
type File struct {
	f    *os.File
	info fs.FileInfo
}

// Open opens the regular file at path, following symlinks, with the checks
// of the package documentation. It never blocks on a FIFO. The caller must
// Close the File.
func Open(path string) (*File, error) {
	before, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := checkRegular(before); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err == nil {
		err = checkRegular(info)
	}
	if err == nil {
		err = checkFileSystem(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &File{f: f, info: info}, nil
}

// Info returns the stat of the open file, taken right after it was opened.
func (f *File) Info() fs.FileInfo { return f.info }

// OS returns the underlying file, for system calls such as statx. Reading
// from it bypasses the bound.
func (f *File) OS() *os.File { return f.f }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// ReadAll reads the rest of the file. It returns an error wrapping
// ErrOversize as soon as the file holds more than limit bytes, and ctx's
// error when ctx ends first; at most limit+1 bytes are ever held.
func (f *File) ReadAll(ctx context.Context, limit int64) ([]byte, error) {
	if limit < 0 {
		limit = 0
	}
	// The stat's size is a hint for one allocation, never trusted as a bound.
	capHint := min(max(f.info.Size(), 512), limit+1)
	buf := make([]byte, 0, capHint)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("%w (%d bytes)", ErrOversize, limit)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		want := min(int64(cap(buf)-len(buf)), chunk, limit+1-int64(len(buf)))
		n, err := f.f.Read(buf[len(buf) : len(buf)+int(want)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			if int64(len(buf)) > limit {
				return nil, fmt.Errorf("%w (%d bytes)", ErrOversize, limit)
			}
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// ReadFile opens the regular file at path and reads it whole, with the
// checks of Open and ReadAll.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadAll(ctx, limit)
}

func checkRegular(fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return &NotRegularError{Kind: kind(fi.Mode())}
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a regular file"
	}
}
