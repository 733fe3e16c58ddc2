// Host memory for callers that want the library's allocator by address (Python's
// mooncake.store.get_alloc_func_addr / get_free_func_addr, which LMCache's "mooncake" local CPU
// allocator calls through ctypes). Plain C, so a call from any thread costs no Go runtime entry.
#include <stdlib.h>
#include <sys/mman.h>

// mc_host_alloc returns size bytes (size > 0) aligned to 4 KiB, or to 2 MiB from 2 MiB on, with
// transparent huge pages asked for (madvise, best effort), or NULL. The memory is not zeroed and
// not registered with any store; free it with mc_host_free.
void *mc_host_alloc(size_t size) {
  if (size == 0) return NULL;
  size_t align = size >= ((size_t)2 << 20) ? ((size_t)2 << 20) : 4096;
  void *p = NULL;
  if (posix_memalign(&p, align, size) != 0) return NULL;
  if (align > 4096) madvise(p, size & ~(align - 1), MADV_HUGEPAGE);
  return p;
}

// mc_host_free frees memory from mc_host_alloc (NULL: nothing).
void mc_host_free(void *p) { free(p); }
