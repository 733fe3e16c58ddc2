/* Transfer-engine section of the Mooncake C ABI (see mooncake.h for the conventions).
 * Addresses are plain integers: a target address is the absolute virtual address of a
 * registered buffer in the remote process, as in Mooncake. Opcode READ 0, WRITE 1.
 * Status values: WAITING 0, PENDING 1, INVALID 2, CANCELED 3, COMPLETED 4, TIMEOUT 5, FAILED 6. */
#ifndef MOONCAKE_ENGINE_H
#define MOONCAKE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Creates an engine. The first engine a process creates is the process-wide one that process
 * groups and the store share (they create it themselves, from the environment, when none
 * exists). metadata_server: "P2PHANDSHAKE", "http://h:p/metadata", "etcd://h:p", "redis://h:p". */
int mc_engine_create(const char *local_hostname, const char *metadata_server, const char *protocol,
                     const char *device_name, uint64_t *out);
int mc_engine_destroy(uint64_t eng);
int mc_engine_rpc_port(uint64_t eng);
/* Copies the segment name into buf; returns its full length (or <0). */
int mc_engine_segment_name(uint64_t eng, char *buf, int32_t buflen);

int mc_engine_register(uint64_t eng, uint64_t addr, uint64_t len, const char *location);
int mc_engine_unregister(uint64_t eng, uint64_t addr);
int mc_engine_register_batch(uint64_t eng, const uint64_t *addrs, const uint64_t *lens, int32_t n,
                             const char *location);
int mc_engine_unregister_batch(uint64_t eng, const uint64_t *addrs, int32_t n);
int mc_engine_allocate_shared(uint64_t eng, uint64_t len, uint64_t *addr);
int mc_engine_free_shared(uint64_t eng, uint64_t addr);

int mc_engine_open_segment(uint64_t eng, const char *name, uint64_t *segment);
/* Address of the first registered buffer of a segment (0 if it has none). */
int mc_engine_first_buffer(uint64_t eng, uint64_t segment, uint64_t *addr);

int mc_engine_allocate_batch(uint64_t eng, int32_t capacity, uint64_t *batch);
/* Submits n requests. notify_name/notify_msg may be NULL (no notification). */
int mc_engine_submit(uint64_t eng, uint64_t batch, int32_t n, const int32_t *opcodes,
                     const uint64_t *sources, const uint64_t *segments, const uint64_t *target_addrs,
                     const uint64_t *lengths, const char *notify_name, const char *notify_msg);
int mc_engine_task_status(uint64_t eng, uint64_t batch, int32_t task, int32_t *status,
                          uint64_t *transferred);
int mc_engine_batch_status(uint64_t eng, uint64_t batch, int32_t *status);
/* Waits up to timeout_ms (<0: the engine's transfer timeout) for the batch to finish. */
int mc_engine_wait_batch(uint64_t eng, uint64_t batch, int64_t timeout_ms, int32_t *status);
int mc_engine_free_batch(uint64_t eng, uint64_t batch);

int mc_engine_send_notify(uint64_t eng, uint64_t segment, const char *name, const char *msg);
/* Drains the notification FIFO as JSON [{"name":..,"msg":..}] into buf; returns the full length.
 * Call with a large enough buffer: notifications that do not fit stay queued. */
int mc_engine_get_notifies(uint64_t eng, char *buf, int32_t buflen);
int mc_engine_probe(uint64_t eng, const char *name);
int mc_engine_topology(uint64_t eng, char *buf, int32_t buflen);
/* Bytes this engine has moved through each transport, as JSON {"local":n,"shm":n,"tcp":n}, into
 * buf; returns the full length. Read-only: shows which transport reached a peer (MC_FORCE_TCP
 * sends same-host transfers over tcp instead of shm). */
int mc_engine_transport_bytes(uint64_t eng, char *buf, int32_t buflen);

#ifdef __cplusplus
}
#endif
#endif
