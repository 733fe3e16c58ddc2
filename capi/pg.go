package main

// Process-group section of the C ABI (include/mooncake_pg.h): argument checks, C pointers to
// Go slices, handles; the group itself is in pg_group.go.
//
// The preamble repeats the header's types instead of including it: cgo writes its own
// prototypes of the exported functions (without const), and a second, const-qualified
// declaration in the same translation unit would conflict. The layouts are identical.

/*
#include <stdint.h>
#include <stdlib.h>

typedef struct mc_store_ops {
  void *ctx;
  int (*set)(void *ctx, const char *key, const uint8_t *val, size_t len);
  int (*get)(void *ctx, const char *key, int64_t timeout_ms, uint8_t **val, size_t *len);
  int (*check)(void *ctx, const char *key);
  int (*add)(void *ctx, const char *key, int64_t delta, int64_t *out);
} mc_store_ops;

typedef struct mc_pg_config {
  int32_t rank;
  int32_t size;
  int32_t max_group_size;
  int32_t is_extension;
  int32_t auto_deactivate_on_failure;
  int32_t auto_sync_on_failure;
  int32_t device_type;
  int64_t timeout_ms;
  const char *group_name;
} mc_pg_config;

typedef void (*mc_work_hook)(void *arg);
static inline void mc_call_work_hook(mc_work_hook fn, void *arg) { fn(arg); }

static inline int mc_pg_store_set(const mc_store_ops *s, const char *key, const uint8_t *val, size_t len) {
  if (s->set == NULL) return -100;
  return s->set(s->ctx, key, val, len);
}
static inline int mc_pg_store_get(const mc_store_ops *s, const char *key, int64_t timeout_ms, uint8_t **val, size_t *len) {
  if (s->get == NULL) return -100;
  return s->get(s->ctx, key, timeout_ms, val, len);
}
static inline int mc_pg_store_check(const mc_store_ops *s, const char *key) {
  if (s->check == NULL) return -100;
  return s->check(s->ctx, key);
}
static inline int mc_pg_store_add(const mc_store_ops *s, const char *key, int64_t delta, int64_t *out) {
  if (s->add == NULL) return -100;
  return s->add(s->ctx, key, delta, out);
}
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/worker"
)

var (
	pgs   handles[*pgroup]
	works handles[*workRef]
)

type workRef struct {
	w       *worker.Work
	timeout time.Duration
}

// cStore calls the shim's store callbacks. ops is a C copy of the caller's struct.
type cStore struct{ ops *C.mc_store_ops }

func (s cStore) Set(key string, val []byte) error {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var cv unsafe.Pointer
	if len(val) > 0 {
		cv = C.CBytes(val)
		defer C.free(cv)
	}
	if rc := C.mc_pg_store_set(s.ops, ck, (*C.uint8_t)(cv), C.size_t(len(val))); rc != 0 {
		return fmt.Errorf("store set %q failed (status %d)", key, int(rc))
	}
	return nil
}

func (s cStore) Get(key string, timeout time.Duration) ([]byte, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var val *C.uint8_t
	var n C.size_t
	rc := C.mc_pg_store_get(s.ops, ck, C.int64_t(max(timeout.Milliseconds(), 1)), &val, &n)
	if val != nil {
		defer C.free(unsafe.Pointer(val))
	}
	switch {
	case rc == -1:
		return nil, fmt.Errorf("key %q did not appear in the store within %s", key, timeout.Round(time.Millisecond))
	case rc != 0:
		return nil, fmt.Errorf("store get %q failed (status %d)", key, int(rc))
	}
	return C.GoBytes(unsafe.Pointer(val), C.int(n)), nil
}

func pgOf(h C.uint64_t) (*pgroup, error) {
	pg, ok := pgs.get(uint64(h))
	if !ok || pg.closed.Load() {
		return nil, invalid(fmt.Sprintf("unknown process group handle %d", uint64(h)))
	}
	return pg, nil
}

func workOf(h C.uint64_t) (*workRef, error) {
	w, ok := works.get(uint64(h))
	if !ok {
		return nil, invalid(fmt.Sprintf("unknown work handle %d", uint64(h)))
	}
	return w, nil
}

func putWork(pg *pgroup, w *worker.Work, out *C.uint64_t) C.int {
	*out = C.uint64_t(works.put(&workRef{w: w, timeout: pg.cfg.timeout}))
	if hk := pg.hook.Load(); hk != nil {
		w.OnFinish(func() { C.mc_call_work_hook(hk.fn, hk.arg) })
	}
	return 0
}

// workHook is the shim's completion callback (mc_pg_set_completion_hook).
type workHook struct {
	fn  C.mc_work_hook
	arg unsafe.Pointer
}

//export mc_pg_set_completion_hook
func mc_pg_set_completion_hook(h C.uint64_t, fn C.mc_work_hook, arg unsafe.Pointer) C.int {
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if fn == nil {
		pg.hook.Store(nil)
	} else {
		pg.hook.Store(&workHook{fn: fn, arg: arg})
	}
	return 0
}

// cbytes turns a C buffer into a slice after checking it.
func cbytes(op, what string, p unsafe.Pointer, n int64) ([]byte, error) {
	switch {
	case n < 0:
		return nil, invalid(fmt.Sprintf("%s: %s has a negative size (%d)", op, what, n))
	case n > 0 && p == nil:
		return nil, invalid(fmt.Sprintf("%s: %s is NULL but its size is %d", op, what, n))
	case uint64(n) > math.MaxInt/2:
		return nil, invalid(fmt.Sprintf("%s: %s size %d is too large", op, what, n))
	}
	return memview.Bytes(uintptr(p), int(n)), nil
}

// cbufs reads size pointers from arr, each to n bytes.
func cbufs(op, what string, arr unsafe.Pointer, size int, n int64) ([][]byte, error) {
	if arr == nil {
		return nil, invalid(fmt.Sprintf("%s: %s is NULL", op, what))
	}
	ptrs := unsafe.Slice((*unsafe.Pointer)(arr), size)
	out := make([][]byte, size)
	for i, p := range ptrs {
		b, err := cbytes(op, fmt.Sprintf("%s[%d]", what, i), p, n)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// elems converts count elements of dtype into bytes, checking the dtype and op.
func elems(op string, count int64, dtype C.int32_t, rop *C.int32_t) (int64, reduce.DType, reduce.Op, error) {
	dt := reduce.DType(dtype)
	es, err := reduce.ElemSize(dt)
	if err != nil {
		return 0, 0, 0, invalid(fmt.Sprintf("%s: %v", op, err))
	}
	var o reduce.Op
	if rop != nil {
		o = reduce.Op(*rop)
		if err := reduce.Check(dt, o); err != nil {
			return 0, 0, 0, invalid(fmt.Sprintf("%s: %v", op, err))
		}
	}
	if count < 0 {
		return 0, 0, 0, invalid(fmt.Sprintf("%s: negative element count %d", op, count))
	}
	if count > math.MaxInt64/int64(es)/2 {
		return 0, 0, 0, invalid(fmt.Sprintf("%s: element count %d is too large", op, count))
	}
	return count * int64(es), dt, o, nil
}

func (pg *pgroup) checkRank(op, what string, r C.int32_t) error {
	if n := pg.extent(); r < 0 || int(r) >= n {
		return invalid(fmt.Sprintf("%s: %s %d is not a rank of this group (size %d)", op, what, int32(r), n))
	}
	return nil
}

//export mc_pg_create
func mc_pg_create(cfg *C.mc_pg_config, store *C.mc_store_ops, out *C.uint64_t) C.int {
	if cfg == nil || store == nil || out == nil {
		return setErr(invalid("mc_pg_create: cfg, store and out must not be NULL"))
	}
	c := pgConfig{
		rank: int(cfg.rank), size: int(cfg.size), maxSize: int(cfg.max_group_size),
		isExtension: cfg.is_extension != 0, autoDeactivate: cfg.auto_deactivate_on_failure != 0,
		autoSync: cfg.auto_sync_on_failure != 0, deviceType: int(cfg.device_type),
		timeout: time.Duration(cfg.timeout_ms) * time.Millisecond, name: goString(cfg.group_name),
	}
	if c.maxSize <= 0 {
		c.maxSize = c.size
	}
	switch {
	case c.size < 1:
		return setErr(invalid(fmt.Sprintf("mc_pg_create: group size %d, want at least 1", c.size)))
	case c.maxSize < c.size:
		return setErr(invalid(fmt.Sprintf("mc_pg_create: max_group_size %d is below the group size %d", c.maxSize, c.size)))
	case c.maxSize > 1024:
		return setErr(invalid(fmt.Sprintf("mc_pg_create: max_group_size %d is above 1024", c.maxSize)))
	case c.rank < 0 || c.rank >= c.maxSize:
		return setErr(invalid(fmt.Sprintf("mc_pg_create: rank %d outside the group's %d slots", c.rank, c.maxSize)))
	case !c.isExtension && c.rank >= c.size:
		return setErr(invalid(fmt.Sprintf("mc_pg_create: rank %d outside a group of %d (is_extension not set)", c.rank, c.size)))
	case c.autoSync && !c.autoDeactivate:
		return setErr(invalid("mc_pg_create: auto_sync_on_failure needs auto_deactivate_on_failure"))
	case c.deviceType != 0 && c.deviceType != 1:
		return setErr(invalid(fmt.Sprintf("mc_pg_create: device_type %d (want 0 cpu or 1 cuda)", c.deviceType)))
	}
	eng, err := processEngine()
	if err != nil {
		return setErr(err)
	}
	ops := (*C.mc_store_ops)(C.malloc(C.size_t(unsafe.Sizeof(C.mc_store_ops{}))))
	*ops = *store
	pg, err := newPGroup(c, cStore{ops}, p2p.EngineFabric(eng))
	if err != nil {
		C.free(unsafe.Pointer(ops))
		return setErr(err)
	}
	word := (*C.int32_t)(C.malloc(4))
	pg.onView = func(extent int) { atomic.StoreInt32((*int32)(unsafe.Pointer(word)), int32(extent)) }
	pg.onView(pg.extent())
	pg.release = func() {
		C.free(unsafe.Pointer(ops))
		C.free(unsafe.Pointer(word))
	}
	pg.extentWord = unsafe.Pointer(word)
	*out = C.uint64_t(pgs.put(pg))
	return 0
}

//export mc_pg_extent_word
func mc_pg_extent_word(h C.uint64_t) *C.int32_t {
	pg, err := pgOf(h)
	if err != nil {
		setErr(err)
		return nil
	}
	return (*C.int32_t)(pg.extentWord)
}

//export mc_pg_destroy
func mc_pg_destroy(h C.uint64_t) C.int {
	pg, ok := pgs.take(uint64(h))
	if !ok {
		return setErr(invalid(fmt.Sprintf("unknown process group handle %d", uint64(h))))
	}
	return setErr(pg.close())
}

//export mc_pg_broadcast
func mc_pg_broadcast(h C.uint64_t, buf unsafe.Pointer, nbytes C.int64_t, root C.int32_t, work *C.uint64_t) C.int {
	const op = "broadcast"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if err := pg.checkRank(op, "root", root); err != nil {
		return setErr(err)
	}
	b, err := cbytes(op, "buf", buf, int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.broadcast(b, int(root)), work)
}

//export mc_pg_allreduce
func mc_pg_allreduce(h C.uint64_t, buf unsafe.Pointer, count C.int64_t, dtype C.int32_t, rop C.int32_t, work *C.uint64_t) C.int {
	const op = "all_reduce"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	n, dt, o, err := elems(op, int64(count), dtype, &rop)
	if err != nil {
		return setErr(err)
	}
	b, err := cbytes(op, "buf", buf, n)
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.allreduce(b, dt, o), work)
}

//export mc_pg_reduce
func mc_pg_reduce(h C.uint64_t, buf unsafe.Pointer, count C.int64_t, dtype C.int32_t, rop C.int32_t, root C.int32_t, work *C.uint64_t) C.int {
	const op = "reduce"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if err := pg.checkRank(op, "root", root); err != nil {
		return setErr(err)
	}
	n, dt, o, err := elems(op, int64(count), dtype, &rop)
	if err != nil {
		return setErr(err)
	}
	b, err := cbytes(op, "buf", buf, n)
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.reduce(b, dt, o, int(root)), work)
}

//export mc_pg_allgather
func mc_pg_allgather(h C.uint64_t, in unsafe.Pointer, nbytes C.int64_t, outs unsafe.Pointer, work *C.uint64_t) C.int {
	const op = "all_gather"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	b, err := cbytes(op, "in", in, int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	bs, err := cbufs(op, "outs", outs, pg.extent(), int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.allgather(b, bs), work)
}

//export mc_pg_gather
func mc_pg_gather(h C.uint64_t, in unsafe.Pointer, nbytes C.int64_t, outs unsafe.Pointer, root C.int32_t, work *C.uint64_t) C.int {
	const op = "gather"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if err := pg.checkRank(op, "root", root); err != nil {
		return setErr(err)
	}
	b, err := cbytes(op, "in", in, int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	var bs [][]byte
	if int(root) == pg.cfg.rank {
		if bs, err = cbufs(op, "outs", outs, pg.extent(), int64(nbytes)); err != nil {
			return setErr(err)
		}
	}
	return putWork(pg, pg.gather(b, bs, int(root)), work)
}

//export mc_pg_scatter
func mc_pg_scatter(h C.uint64_t, ins unsafe.Pointer, out unsafe.Pointer, nbytes C.int64_t, root C.int32_t, work *C.uint64_t) C.int {
	const op = "scatter"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if err := pg.checkRank(op, "root", root); err != nil {
		return setErr(err)
	}
	b, err := cbytes(op, "out", out, int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	var bs [][]byte
	if int(root) == pg.cfg.rank {
		if bs, err = cbufs(op, "ins", ins, pg.extent(), int64(nbytes)); err != nil {
			return setErr(err)
		}
	}
	return putWork(pg, pg.scatter(bs, b, int(root)), work)
}

//export mc_pg_reduce_scatter
func mc_pg_reduce_scatter(h C.uint64_t, ins unsafe.Pointer, out unsafe.Pointer, count C.int64_t, dtype C.int32_t, rop C.int32_t, work *C.uint64_t) C.int {
	const op = "reduce_scatter"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	n, dt, o, err := elems(op, int64(count), dtype, &rop)
	if err != nil {
		return setErr(err)
	}
	b, err := cbytes(op, "out", out, n)
	if err != nil {
		return setErr(err)
	}
	bs, err := cbufs(op, "ins", ins, pg.extent(), n)
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.reduceScatter(bs, b, dt, o), work)
}

//export mc_pg_alltoall
func mc_pg_alltoall(h C.uint64_t, ins unsafe.Pointer, inBytes *C.int64_t, outs unsafe.Pointer, outBytes *C.int64_t, work *C.uint64_t) C.int {
	const op = "all_to_all"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if ins == nil || outs == nil || inBytes == nil || outBytes == nil {
		return setErr(invalid(op + ": ins, in_bytes, outs and out_bytes must not be NULL"))
	}
	n := pg.extent()
	ib := unsafe.Slice((*int64)(unsafe.Pointer(inBytes)), n)
	ob := unsafe.Slice((*int64)(unsafe.Pointer(outBytes)), n)
	ip := unsafe.Slice((*unsafe.Pointer)(ins), n)
	opp := unsafe.Slice((*unsafe.Pointer)(outs), n)
	bi, bo := make([][]byte, n), make([][]byte, n)
	for i := 0; i < n; i++ {
		if bi[i], err = cbytes(op, fmt.Sprintf("ins[%d]", i), ip[i], ib[i]); err != nil {
			return setErr(err)
		}
		if bo[i], err = cbytes(op, fmt.Sprintf("outs[%d]", i), opp[i], ob[i]); err != nil {
			return setErr(err)
		}
	}
	return putWork(pg, pg.alltoall(bi, bo), work)
}

//export mc_pg_send
func mc_pg_send(h C.uint64_t, buf unsafe.Pointer, nbytes C.int64_t, dst C.int32_t, tag C.int32_t, work *C.uint64_t) C.int {
	const op = "send"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if dst < 0 || int(dst) >= pg.cfg.maxSize {
		return setErr(invalid(fmt.Sprintf("send: destination %d is not a rank of this group (size %d)", int32(dst), pg.extent())))
	}
	b, err := cbytes(op, "buf", buf, int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.send(b, int(dst), int32(tag)), work)
}

//export mc_pg_recv
func mc_pg_recv(h C.uint64_t, buf unsafe.Pointer, nbytes C.int64_t, src C.int32_t, tag C.int32_t, work *C.uint64_t) C.int {
	const op = "recv"
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	if src < -1 || int(src) >= pg.cfg.maxSize {
		return setErr(invalid(fmt.Sprintf("recv: source %d is not a rank of this group (size %d; -1 = any)", int32(src), pg.extent())))
	}
	b, err := cbytes(op, "buf", buf, int64(nbytes))
	if err != nil {
		return setErr(err)
	}
	return putWork(pg, pg.recv(b, int(src), int32(tag)), work)
}

//export mc_pg_barrier
func mc_pg_barrier(h C.uint64_t, work *C.uint64_t) C.int {
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if work == nil {
		return setErr(invalid("barrier: work is NULL"))
	}
	return putWork(pg, pg.barrier(), work)
}

//export mc_work_wait
func mc_work_wait(h C.uint64_t, timeoutMs C.int64_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	d := time.Duration(timeoutMs) * time.Millisecond
	if timeoutMs < 0 {
		d = wr.timeout
	}
	err = wr.w.Wait(d)
	if errors.Is(err, worker.ErrRunning) {
		setErr(err)
		return codeStillRunning
	}
	return setErr(withCode(err))
}

//export mc_work_test
func mc_work_test(h C.uint64_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	if wr.w.Completed() {
		return 1
	}
	return 0
}

//export mc_work_run
func mc_work_run(h C.uint64_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	if wr.w.RunHere() {
		return 1
	}
	return 0
}

//export mc_work_start
func mc_work_start(h C.uint64_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	wr.w.Start()
	return 0
}

//export mc_pg_set_held_starts
func mc_pg_set_held_starts(h C.uint64_t, on C.int) C.int {
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	pg.heldStarts.Store(on != 0)
	return 0
}

//export mc_work_is_success
func mc_work_is_success(h C.uint64_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	if wr.w.Completed() && wr.w.Err() == nil && len(wr.w.FailedRanks()) == 0 {
		return 1
	}
	return 0
}

//export mc_work_error
func mc_work_error(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	msg := ""
	if e := wr.w.Err(); e != nil {
		msg = e.Error()
	}
	return copyOut(msg, buf, C.int(buflen))
}

//export mc_work_source
func mc_work_source(h C.uint64_t) C.int32_t {
	wr, err := workOf(h)
	if err != nil {
		setErr(err)
		return -1
	}
	return C.int32_t(wr.w.Source())
}

//export mc_work_failed_ranks
func mc_work_failed_ranks(h C.uint64_t, out *C.int32_t, n C.int32_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	if n < 0 || (n > 0 && out == nil) {
		return setErr(invalid("mc_work_failed_ranks: out is NULL or n is negative"))
	}
	flags := unsafe.Slice((*int32)(unsafe.Pointer(out)), int(n))
	for i := range flags {
		flags[i] = 0
	}
	for _, r := range wr.w.FailedRanks() {
		if r >= 0 && r < len(flags) {
			flags[r] = 1
		}
	}
	return 0
}

//export mc_work_free
func mc_work_free(h C.uint64_t) C.int {
	if _, ok := works.take(uint64(h)); !ok {
		return setErr(invalid(fmt.Sprintf("unknown work handle %d", uint64(h))))
	}
	return 0
}

//export mc_pg_get_active_ranks
func mc_pg_get_active_ranks(h C.uint64_t, out *C.int32_t, n C.int32_t) C.int {
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if n < 0 || (n > 0 && out == nil) {
		return setErr(invalid("mc_pg_get_active_ranks: out is NULL or n is negative"))
	}
	flags := unsafe.Slice((*int32)(unsafe.Pointer(out)), int(n))
	act := pg.g.ActiveRanks()
	for i := range flags {
		flags[i] = 0
		if i < len(act) && act[i] {
			flags[i] = 1
		}
	}
	return 0
}

//export mc_pg_max_group_size
func mc_pg_max_group_size(h C.uint64_t) C.int32_t {
	pg, err := pgOf(h)
	if err != nil {
		return C.int32_t(setErr(err))
	}
	return C.int32_t(pg.cfg.maxSize)
}

//export mc_pg_current_epoch
func mc_pg_current_epoch(h C.uint64_t) C.int64_t {
	pg, err := pgOf(h)
	if err != nil {
		return C.int64_t(setErr(err))
	}
	return C.int64_t(pg.g.Epoch())
}

// storeCheck and storeAdd reach the other two callbacks (used by elastic membership).
func (s cStore) Check(key string) (bool, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	rc := C.mc_pg_store_check(s.ops, ck)
	if rc < 0 {
		return false, fmt.Errorf("store check %q failed (status %d)", key, int(rc))
	}
	return rc == 1, nil
}

func (s cStore) Add(key string, delta int64) (int64, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var out C.int64_t
	if rc := C.mc_pg_store_add(s.ops, ck, C.int64_t(delta), &out); rc != 0 {
		return 0, fmt.Errorf("store add %q failed (status %d)", key, int(rc))
	}
	return int64(out), nil
}

//export mc_pg_membership
func mc_pg_membership(h C.uint64_t, request *C.char, out *C.char, outlen C.int32_t) C.int {
	pg, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if request == nil {
		return setErr(invalid("mc_pg_membership: request is NULL"))
	}
	var req memberRequest
	if err := json.Unmarshal([]byte(C.GoString(request)), &req); err != nil {
		return setErr(invalid(fmt.Sprintf("mc_pg_membership: malformed request: %v", err)))
	}
	res, err := pg.membershipCall(req)
	if err != nil {
		return setErr(err)
	}
	b, _ := json.Marshal(res)
	return copyOut(string(b), out, C.int(outlen))
}
