// Package source provides file sources for reconf with source integrity:
// a configuration file is only accepted when it was replaced as a whole, is
// not changing while it is read, and is a bounded regular file.
//
//	src, err := source.File("/etc/app/config.yaml")
//	if err != nil {
//		return err
//	}
//	rt, err := reconf.New[Config](ctx, src)
//
// # Identity
//
// Every Read re-reads the path; nothing is cached between reads. A read's
// identity is the device and inode number of the final target after all
// symlinks are resolved, plus the size and a SHA-256 digest of the bytes
// read. On Linux the file's birth time is part of the identity too, where
// the file system reports one: some file systems (ext4 among them) give a
// new file the inode number of one recently deleted, and the birth time
// tells the two apart. The identity is returned as the snapshot's opaque Version and is
// kept in memory only: the digest is never exposed through any exported API,
// printed form or error.
//
// The runtime hands back the Version of the last read this source accepted
// in reconf.ReadRequest.Last, whether or not the candidate it held was
// published (a file that failed validation and is then rewritten in place
// is still rewritten in place). Compared with it, a new read is:
//
//   - the same file with the same digest: accepted; the runtime compiles
//     it again, so a file that failed fails again with the same answer and
//     one that was published is a no-op;
//   - the same file with a different digest: refused with
//     source_non_atomic_update, because the file was rewritten in place and
//     a reader could have seen half of the old and half of the new bytes;
//   - a different file (a new device or inode): accepted, because it
//     replaced the old one atomically.
//
// # Updating a file atomically
//
// Write the new content to a temporary file in the same directory (so both
// are on the same file system), then rename it over the path:
//
//	tmp := filepath.Join(dir, ".config.yaml.tmp")
//	if err := os.WriteFile(tmp, data, 0o644); err != nil {
//		return err
//	}
//	if err := os.Rename(tmp, filepath.Join(dir, "config.yaml")); err != nil {
//		return err
//	}
//
// The rename replaces the directory entry in one step, so a reader sees
// either the old file or the new one, never a mix. The shell equivalent is
// writing to a temporary file and running mv. Editors that save in place,
// shell redirection (>) and os.WriteFile on the path itself rewrite the
// existing inode and are refused.
//
// # Symlinks and Kubernetes ConfigMaps
//
// Symlinks are followed, so replacing a symlink's target atomically is an
// atomic update too. A ConfigMap mounted as a volume is laid out as
//
//	config.yaml -> ..data/config.yaml
//	..data -> ..2026_12_02_00_00_00.1
//	..2026_12_02_00_00_00.1/config.yaml
//
// and the kubelet updates it by writing a new timestamped directory,
// creating a ..data_tmp symlink to it and renaming ..data_tmp over ..data.
// The path config.yaml then resolves to a new inode, which is accepted.
//
// # Failures
//
// Read returns a *reconf.Error whose Reason is one of:
//
//   - source_missing: the path does not exist or is a dangling symlink;
//   - source_not_regular: the path is a directory, FIFO, socket or device
//     (checked before opening, and a FIFO is never opened in a way that
//     blocks);
//   - source_oversize: the file is larger than ReadRequest.MaxBytes, or
//     reconf.DefaultMaxSourceBytes when that is not positive; the read
//     itself is bounded too, in case the file grows;
//   - source_unstable: the size, modification time or identity changed
//     between the stat before opening, the stat of the open file and a stat
//     after reading, or fewer or more bytes were read than the size;
//   - source_non_atomic_update: the file was rewritten in place (see above);
//   - source_unreadable: permission denied, a symlink loop or an I/O error.
//
// Messages tell the operator what to do and never quote the file's content.
// If the context is done before the read, Read returns the context's error.
//
// Device and inode numbers are read on Unix systems. Elsewhere the other
// checks apply but in-place rewrites are not detected.
package source
