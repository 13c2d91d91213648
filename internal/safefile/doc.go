// Package safefile reads the files a configuration names (the source,
// ${file:} secrets, digested `reconf:",file"` files, prompt files) so that
// no file can hold the process: only a regular file is read, after
// symlinks; the open cannot block on a FIFO; the size bound is checked
// while reading, so /dev/zero or a growing file costs at most the bound
// plus one byte; and the read stops when its context ends.
//
// The checks, in order:
//
//  1. stat the path (following symlinks) and refuse anything but a regular
//     file without opening it, so a device or FIFO is never opened;
//  2. open it with O_NONBLOCK, so that a path swapped for a FIFO after the
//     stat does not block the open, and fstat the open file: that is the
//     file read, so it must be regular too (and, on Linux, not on a pseudo
//     file system such as /proc or /sys, whose "regular" files report a size
//     unrelated to their content);
//  3. read in chunks, checking the context between chunks and refusing the
//     file as soon as it holds more than the bound.
//
// Errors wrap ErrNotRegular or ErrOversize, or the fs error of the stat,
// open or read (fs.ErrNotExist, fs.ErrPermission). They name no content.
//
// # Credentials
//
// A file that holds a credential (a ${file:} secret, a management token
// file) is read with ReadCredential, which adds ssh's rule for private
// keys, checked on the opened file before a byte is read: no write for
// group or others (ErrCredentialWritable), no read for others
// (ErrCredentialReadable), and an owner that is this user or root
// (ErrCredentialOwner). Group read is allowed. There is no warn mode: a
// file someone else could read or write is a credential someone else may
// know or choose.
package safefile
