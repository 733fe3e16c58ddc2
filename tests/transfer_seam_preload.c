/* A fault injector for libmooncake_pg.so's transfer seam, written for tests/test_transfer_seam.py
 * without upstream's code or headers: an LD_PRELOAD library that defines the three C++ methods
 * upstream's tests interpose (by their mangled names, through asm labels) and calls the
 * definitions it hides (dlsym(RTLD_NEXT), else dlopen("libmooncake_pg.so", RTLD_NOLOAD)). Every
 * call goes to the hidden definition first; a transfer the hidden getTransferStatus reports
 * COMPLETED to a rank named with seam_fault_fail_target is reported FAILED instead.
 *
 * The calling convention is the Itanium C++ ABI on x86-64, spelled in C:
 *   - Status (a uint16_t code and a char pointer; it has a user-provided destructor) is returned
 *     through a hidden pointer passed first, before `this`; the callee returns that pointer.
 *   - std::optional<uint64_t> (trivially copyable, 16 bytes: value, then the engaged flag) comes
 *     back in two registers, as a C struct of a uint64_t and a char does.
 *   - const std::vector<TransferRequest>& is a pointer to {begin, end, capacity}; a request is
 *     56 bytes with the target segment at offset 16.
 *   - TransferStatus is {int s; size_t transferred_bytes}; COMPLETED = 4, FAILED = 6.
 *
 * Control (ctypes): seam_fault_fail_target(rank), seam_fault_clear(), seam_fault_count(),
 * seam_fault_ready() (1 when the hidden definitions were found). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
  uint16_t code;
  const char *message;
} status_t;

typedef struct {
  int opcode;
  void *source;
  uint64_t target_id;
  uint64_t target_offset;
  size_t length;
  int advise_retry_cnt;
  int transport_hint;
  uint64_t task_group_id;
} request_t;

typedef struct {
  const request_t *begin, *end, *capacity;
} request_vector_t;

typedef struct {
  int s;
  size_t transferred_bytes;
} transfer_status_t;

typedef struct {
  uint64_t value;
  char engaged;
} optional_segment_t;

_Static_assert(sizeof(request_t) == 56, "TransferRequest is 56 bytes");
_Static_assert(offsetof(request_t, target_id) == 16, "target_id at 16");
_Static_assert(sizeof(optional_segment_t) == 16, "optional<uint64_t> is 16 bytes");

enum { COMPLETED = 4, FAILED = 6, MAX_RANKS = 1024, MAX_SEGMENTS = 256, MAX_BATCHES = 256,
       MAX_TASKS = 64 };

#define SUBMIT "_ZN8mooncake14TransferEngine14submitTransferEmRKSt6vectorINS_9Transport15TransferRequestESaIS3_EE"
#define STATUS "_ZN8mooncake14TransferEngine17getTransferStatusEmmRNS_9Transport14TransferStatusE"
#define RESOLVE "_ZNK8mooncake11LinkManager11resolvePeerEi"

typedef status_t *(*submit_fn)(status_t *, void *, uint64_t, const request_vector_t *);
typedef status_t *(*status_fn)(status_t *, void *, uint64_t, size_t, transfer_status_t *);
typedef optional_segment_t (*resolve_fn)(const void *, int32_t);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char fail_to[MAX_RANKS];
static uint64_t injected;
static struct { uint64_t segment; int32_t rank; } segments[MAX_SEGMENTS];
static int n_segments;
static struct { uint64_t batch; int n; int32_t ranks[MAX_TASKS]; int used; } batches[MAX_BATCHES];

static void *hidden(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (f == NULL) {
    /* Loaded in a local scope (the torch shim's dependencies): RTLD_NEXT does not see it. */
    void *h = dlopen("libmooncake_pg.so", RTLD_LAZY | RTLD_NOLOAD);
    if (h != NULL) f = dlsym(h, name);
  }
  return f;
}

static int32_t rank_of(uint64_t segment) { /* under mu */
  for (int i = 0; i < n_segments; i++)
    if (segments[i].segment == segment) return segments[i].rank;
  return -1;
}

optional_segment_t resolve_peer(const void *self, int32_t peer) __asm__(RESOLVE);
optional_segment_t resolve_peer(const void *self, int32_t peer) {
  resolve_fn real = (resolve_fn)hidden(RESOLVE);
  if (real == NULL) abort();
  optional_segment_t seg = real(self, peer);
  if (seg.engaged) {
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < n_segments && segments[i].segment != seg.value) i++;
    if (i < MAX_SEGMENTS) {
      segments[i].segment = seg.value;
      segments[i].rank = peer;
      if (i == n_segments) n_segments++;
    }
    pthread_mutex_unlock(&mu);
  }
  return seg;
}

status_t *submit_transfer(status_t *ret, void *self, uint64_t batch, const request_vector_t *v)
    __asm__(SUBMIT);
status_t *submit_transfer(status_t *ret, void *self, uint64_t batch, const request_vector_t *v) {
  submit_fn real = (submit_fn)hidden(SUBMIT);
  if (real == NULL) abort();
  real(ret, self, batch, v);
  if (ret->code == 0) {
    pthread_mutex_lock(&mu);
    int slot = (int)(batch % MAX_BATCHES);
    batches[slot].batch = batch;
    batches[slot].used = 1;
    batches[slot].n = (int)(v->end - v->begin);
    for (int i = 0; i < batches[slot].n && i < MAX_TASKS; i++)
      batches[slot].ranks[i] = rank_of(v->begin[i].target_id);
    pthread_mutex_unlock(&mu);
  }
  return ret;
}

status_t *transfer_status(status_t *ret, void *self, uint64_t batch, size_t task,
                          transfer_status_t *st) __asm__(STATUS);
status_t *transfer_status(status_t *ret, void *self, uint64_t batch, size_t task,
                          transfer_status_t *st) {
  status_fn real = (status_fn)hidden(STATUS);
  if (real == NULL) abort();
  real(ret, self, batch, task, st);
  if (ret->code == 0 && st->s == COMPLETED) {
    pthread_mutex_lock(&mu);
    int slot = (int)(batch % MAX_BATCHES);
    if (batches[slot].used && batches[slot].batch == batch && task < (size_t)batches[slot].n &&
        task < MAX_TASKS) {
      int32_t r = batches[slot].ranks[task];
      if (r >= 0 && r < MAX_RANKS && fail_to[r]) {
        st->s = FAILED;
        injected++;
      }
    }
    pthread_mutex_unlock(&mu);
  }
  return ret;
}

int seam_fault_ready(void) {
  return hidden(SUBMIT) != NULL && hidden(STATUS) != NULL && hidden(RESOLVE) != NULL;
}

void seam_fault_fail_target(int rank) {
  if (rank < 0 || rank >= MAX_RANKS) return;
  pthread_mutex_lock(&mu);
  fail_to[rank] = 1;
  pthread_mutex_unlock(&mu);
}

void seam_fault_clear(void) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_RANKS; i++) fail_to[i] = 0;
  pthread_mutex_unlock(&mu);
}

uint64_t seam_fault_count(void) {
  pthread_mutex_lock(&mu);
  uint64_t n = injected;
  pthread_mutex_unlock(&mu);
  return n;
}
