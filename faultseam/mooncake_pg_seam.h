/* libmooncake_pg.so: the transfer-status seam of Mooncake PG's data path, for fault injection.
 *
 * Upstream Mooncake PG's tests fail a rank's transfers by LD_PRELOADing a library that redefines
 * three of upstream's C++ methods (TransferEngine::submitTransfer, TransferEngine::getTransferStatus,
 * LinkManager::resolvePeer) and finds the originals with dlsym(RTLD_NEXT) or
 * dlopen("libmooncake_pg.so", RTLD_NOLOAD). This library defines those three methods with
 * upstream's mangled names and calling convention (upstream_abi.hpp) and calls them through its
 * PLT, so a preloaded definition is the one that runs. Without a preload nothing here is used:
 * the torch shim asks mooncake_pg_seam_interposed() once per group and hands the check to
 * libmooncake only when it returns 1 (docs/elastic.md, "Fault injection seam").
 */
#ifndef MOONCAKE_PG_SEAM_H
#define MOONCAKE_PG_SEAM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when one of the three methods resolves, in the global scope, to a definition other than
 * this library's (an LD_PRELOADed fault injector), else 0. */
int mooncake_pg_seam_interposed(void);

/* A seam for one process group of max_group_size slots (its LinkManager and TransferEngine
 * objects); NULL on bad arguments or no memory. */
void *mooncake_pg_seam_open(int32_t max_group_size);
void mooncake_pg_seam_close(void *seam);

/* Reports the transfers of one op through the seam: this rank sent lengths[i] bytes to group
 * rank ranks[i], for i < n. Resolves each rank's segment (LinkManager::resolvePeer), submits one
 * WRITE request per rank in one batch (TransferEngine::submitTransfer) and reads every task's
 * status (TransferEngine::getTransferStatus): failed[i] = 1 when it is not COMPLETED, else 0.
 * Returns 0, or -1 when the seam itself fails (bad arguments, a rank it cannot resolve, a
 * non-OK Status); then every failed[i] is 1 and the reason is printed on stderr. */
int mooncake_pg_seam_check(void *seam, const int32_t *ranks, const uint64_t *lengths, int32_t n,
                           int32_t *failed);

#ifdef __cplusplus
}
#endif

#endif
