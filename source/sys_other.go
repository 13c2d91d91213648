//go:build !unix

package source

import "io/fs"

// fileID reports that device and inode numbers are not available on this
// platform; in-place rewrites are then not detected.
func fileID(fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
