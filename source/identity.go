package source

import (
	"crypto/sha256"
	"fmt"
)

// identity is the Snapshot.Version of a FileSource read: which file was read
// (device and inode of the final symlink target, and its birth time where
// the system reports one) and what it held (size and SHA-256 digest). It
// lives in memory only. Its String and GoString omit the digest so that
// printing a Version never reveals anything about the content.
type identity struct {
	dev, ino uint64
	known    bool  // dev and ino are meaningful on this platform
	btime    int64 // birth time in nanoseconds; 0 when not reported
	size     int64
	digest   [sha256.Size]byte
}

// rewrittenInPlace reports whether id is the same file as last with
// different bytes: the signature of a non-atomic update. A file is the same
// when its device, inode number and birth time are; the birth time guards
// against an inode number reused by a later file.
func (id identity) rewrittenInPlace(last identity) bool {
	return id.known && last.known &&
		id.dev == last.dev && id.ino == last.ino && id.btime == last.btime &&
		id.digest != last.digest
}

func (id identity) String() string {
	return fmt.Sprintf("file(dev=%d, ino=%d, size=%d)", id.dev, id.ino, id.size)
}

func (id identity) GoString() string { return id.String() }
