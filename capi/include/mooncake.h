/* The Mooncake C ABI: one flat interface over libmooncake.so (a Go c-shared library).
 *
 * Conventions: opaque uint64_t handles; int status, 0 ok and negative on error (Mooncake's
 * error numbers where one exists); mooncake_last_error() returns the calling thread's last
 * error message (valid until that thread's next call). No pointer the library returns or keeps
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

#ifdef __cplusplus
}
#endif

#include "mooncake_engine.h"
#include "mooncake_pg.h"
#include "mooncake_store.h"

#endif
