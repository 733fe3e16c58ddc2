// Package dfs owns the on-disk format of the G3 file tier (--root_fs_dir): one file per object,
// written to a temporary name, checksummed and renamed into place, and read back with its
// header and checksum verified so that a torn, corrupt or missing file is an error for that
// key and never wrong bytes.
//
// # Format
//
// A file is a 4 KiB header block followed by the payload. The header holds a magic, the
// format version, the payload size, the payload's checksum, the key and a checksum of the
// header itself: CRC-32 (IEEE) in format version 2, CRC-32C in version 1 (still read; it was
// replaced because CRC-32 runs about 3x faster over payloads that are not in the CPU's cache). The payload starts at a 4 KiB boundary so that a reader or writer may use
// O_DIRECT; the file is padded to a 4 KiB multiple.
//
// # I/O
//
// Payloads are moved with pwrite/pread of large blocks ([BlockSize]), up to [Parallel] blocks
// in flight on one file. Writes try O_DIRECT first (when the source memory and length are
// aligned) and fall back to buffered I/O where the filesystem refuses it (tmpfs, some FUSE
// mounts). Bucket files ([WriteBucket]) are written with pwritev straight from the objects'
// memory, and objects of one file read together ([ReadMany]) with preadv into their
// destinations, each region of adjacent objects front to back in calls of about 128 KiB so
// that the kernel's readahead treats it as a sequential stream. 3FS's USRBIO interface is not available here; the seam for it is [IO]: a
// backend that implements WriteAt/ReadAt (and, for the vectored paths, [VectorIO] and
// [VectorReadIO]) over its own queues can replace [PosixIO].
//
// The package reads no environment and keeps no global state; the master uses [Remove] to
// delete the files of removed objects, the store client [Write] and [Read].
package dfs
