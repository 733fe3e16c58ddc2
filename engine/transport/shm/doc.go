// Package shm is the same-host transport: shared buffers and memcpy.
//
// Alloc creates a buffer backed by a memfd (falling back to a /dev/shm file where memfd is
// unavailable) and maps it MAP_SHARED. Its ShmInfo (owner pid, fd number, memfd name, size)
// goes into the segment descriptor; a peer on the same host (same boot id and network
// namespace: the engine decides that) opens /proc/<pid>/fd/<fd>, checks that the link names
// the expected memfd, and maps it. Mappings are made lazily, on first use, and cached.
//
// A WRITE or READ is then a plain copy between the local buffer and the mapping, applied in
// the order given. After a 4-byte WRITE to a 4-aligned address the transport wakes futex
// waiters on that word through its own mapping: shared futexes are keyed by the file page,
// so waiters in the owner's mapping wake.
//
// A peer that died is detected with a pidfd (kill(pid, 0) where pidfd_open is missing): its
// runs fail with transport.ErrPeerGone instead of writing into an orphaned mapping.
//
// The package never touches buffers that are not shared; plain registered memory on a
// same-host peer goes through tcp.
package shm
