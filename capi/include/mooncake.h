/* The Mooncake C ABI: one flat interface over libmooncake.so (a Go c-shared library).
 *
 * Conventions: opaque uint64_t handles; int status, 0 ok and negative on error (Mooncake's
 * error numbers where one exists); mooncake_last_error() returns the calling thread's last
 * error message (valid until that thread's next call), and the library also logs it once to stderr
 * where it happens, in glog's format ("E1206 01:23:45.678901 12345 engine.go:118] mc_engine_create:
 * error -1: ..."; MC_LOG_LEVEL=TRACE, INFO (default), WARNING or ERROR; outcomes callers test
 * for, such as OBJECT_NOT_FOUND, only at TRACE). No pointer the library returns or keeps
 * refers to Go memory. A process that loaded the library must not call it from a fork()ed child.
 */
#ifndef MOONCAKE_H
#define MOONCAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char *mooncake_last_error(void);
const char *mooncake_version(void);

/* Host memory by the library's allocator: size bytes (size > 0) aligned to 4 KiB, or to 2 MiB
 * from 2 MiB on (transparent huge pages asked for), not zeroed; NULL on failure. Free with
 * mc_host_free. */
void *mc_host_alloc(size_t size);
void mc_host_free(void *p);

#ifdef __cplusplus
}
#endif

#include "mooncake_engine.h"
#include "mooncake_pg.h"
#include "mooncake_store.h"

#endif
