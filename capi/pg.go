package main

// Process-group section of the C ABI (include/mooncake_pg.h): C pointers to Go slices, the
// handle tables, the shim's store callbacks and completion hook. The group itself (creation,
// ops, membership) is package pg.
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

typedef int (*mc_pg_transfer_check_fn)(void *ctx, const int32_t *ranks, const uint64_t *lengths,
                                       int32_t n, int32_t *failed);
static inline int mc_pg_call_transfer_check(mc_pg_transfer_check_fn fn, void *ctx, const int32_t *ranks,
                                            const uint64_t *lengths, int32_t n, int32_t *failed) {
  return fn(ctx, ranks, lengths, n, failed);
}

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
  mc_pg_transfer_check_fn transfer_check;
  void *transfer_ctx;
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
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/pg"
	"github.com/mooncake-go/mooncake/worker"
)

// codeStillRunning is mc_work_wait's answer when the op is still running at the timeout.
const codeStillRunning = -2

var (
	pgs   handles[*pgHandle]
	works handles[*workRef]
)

// pgHandle is a process group as the C side holds it: the group, the C memory it owns, and
// the shim's completion hook.
type pgHandle struct {
	g    *pg.Group
	ops  *C.mc_store_ops // the caller's store callbacks, copied
	word *C.int32_t      // the world size, read by the shim (mc_pg_world_size_word)
	hook atomic.Pointer[workHook]
}

type workRef struct {
	w       *worker.Work
	timeout time.Duration
}

// workHook is the shim's completion callback (mc_pg_set_completion_hook).
type workHook struct {
	fn  C.mc_work_hook
	arg unsafe.Pointer
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

func pgOf(h C.uint64_t) (*pgHandle, error) {
	ph, ok := pgs.get(uint64(h))
	if !ok || ph.g.Closed() {
		return nil, invalid(fmt.Sprintf("unknown process group handle %d", uint64(h)))
	}
	return ph, nil
}

func workOf(h C.uint64_t) (*workRef, error) {
	w, ok := works.get(uint64(h))
	if !ok {
		return nil, invalid(fmt.Sprintf("unknown work handle %d", uint64(h)))
	}
	return w, nil
}

// pgOp is the body of every op entry: it finds the group, builds the op (build converts the
// C arguments and submits) and returns the work's handle through out.
func pgOp(h C.uint64_t, op string, out *C.uint64_t, build func(g *pg.Group) (*worker.Work, error)) C.int {
	ph, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if out == nil {
		return setErr(invalid(op + ": work is NULL"))
	}
	w, err := build(ph.g)
	if err != nil {
		return setErr(err)
	}
	*out = C.uint64_t(works.put(&workRef{w: w, timeout: ph.g.Timeout()}))
	if hk := ph.hook.Load(); hk != nil {
		w.OnFinish(func() { C.mc_call_work_hook(hk.fn, hk.arg) })
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

// cbufs reads size pointers from arr, each to n bytes (the group checks size: pg.Group.byRank).
func cbufs(op, what string, arr unsafe.Pointer, size int, n int64) ([][]byte, error) {
	switch {
	case arr == nil:
		return nil, invalid(fmt.Sprintf("%s: %s is NULL", op, what))
	case size < 0 || size > pg.MaxGroupSize:
		return nil, invalid(fmt.Sprintf("%s: %d entries in %s", op, size, what))
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

// elems converts count elements of dtype into bytes, checking the dtype and, when rop is not
// nil, the reduction.
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

// reduceArgs converts a reduction's C buffer, element count, dtype and op.
func reduceArgs(op, what string, buf unsafe.Pointer, count C.int64_t, dtype, rop C.int32_t) ([]byte, reduce.DType, reduce.Op, error) {
	n, dt, o, err := elems(op, int64(count), dtype, &rop)
	if err != nil {
		return nil, 0, 0, err
	}
	b, err := cbytes(op, what, buf, n)
	return b, dt, o, err
}

//export mc_pg_create
func mc_pg_create(cfg *C.mc_pg_config, store *C.mc_store_ops, out *C.uint64_t) C.int {
	if cfg == nil || store == nil || out == nil {
		return setErr(invalid("mc_pg_create: cfg, store and out must not be NULL"))
	}
	eng, err := processEngine()
	if err != nil {
		return setErr(err)
	}
	ph := &pgHandle{
		ops:  (*C.mc_store_ops)(C.malloc(C.size_t(unsafe.Sizeof(C.mc_store_ops{})))),
		word: (*C.int32_t)(C.malloc(4)),
	}
	*ph.ops = *store
	word := (*int32)(unsafe.Pointer(ph.word))
	*word = 0
	c := pg.Config{
		Rank: int(cfg.rank), Size: int(cfg.size), MaxSize: int(cfg.max_group_size),
		IsExtension: cfg.is_extension != 0, AutoDeactivate: cfg.auto_deactivate_on_failure != 0,
		AutoSync: cfg.auto_sync_on_failure != 0, DeviceType: int(cfg.device_type),
		Timeout: time.Duration(cfg.timeout_ms) * time.Millisecond, Name: goString(cfg.group_name),
		OnWorldSize: func(n int) { atomic.StoreInt32(word, int32(n)) },
		Options:     config.PG(),
	}
	c.Options.NoAuth = !config.PGAuth.Bool() // MOONCAKE_PG_AUTH
	c.Options.Observer = pgObserver(c)       // process-group metrics (pg_metrics.go)
	if cfg.transfer_check != nil {
		c.Options.TransferCheck = transferCheck(cfg.transfer_check, cfg.transfer_ctx)
	}
	ph.g, err = pg.New(c, cStore{ph.ops}, p2p.EngineFabric(eng))
	if err != nil {
		ph.free()
		return setErr(fmt.Errorf("mc_pg_create: %w", err))
	}
	*out = C.uint64_t(pgs.put(ph))
	return 0
}

func (ph *pgHandle) free() {
	C.free(unsafe.Pointer(ph.ops))
	C.free(unsafe.Pointer(ph.word))
}

//export mc_pg_world_size_word
func mc_pg_world_size_word(h C.uint64_t) *C.int32_t {
	ph, err := pgOf(h)
	if err != nil {
		setErr(err)
		return nil
	}
	return ph.word
}

//export mc_pg_destroy
func mc_pg_destroy(h C.uint64_t) C.int {
	ph, ok := pgs.take(uint64(h))
	if !ok {
		return setErr(invalid(fmt.Sprintf("unknown process group handle %d", uint64(h))))
	}
	err := ph.g.Close()
	ph.free()
	return setErr(err)
}

//export mc_pg_set_completion_hook
func mc_pg_set_completion_hook(h C.uint64_t, fn C.mc_work_hook, arg unsafe.Pointer) C.int {
	ph, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if fn == nil {
		ph.hook.Store(nil)
	} else {
		ph.hook.Store(&workHook{fn: fn, arg: arg})
	}
	return 0
}

//export mc_pg_set_held_starts
func mc_pg_set_held_starts(h C.uint64_t, on C.int) C.int {
	ph, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	ph.g.SetHeldStarts(on != 0)
	return 0
}

//export mc_pg_broadcast
func mc_pg_broadcast(h C.uint64_t, buf unsafe.Pointer, nbytes C.int64_t, root C.int32_t, work *C.uint64_t) C.int {
	return pgOp(h, "broadcast", work, func(g *pg.Group) (*worker.Work, error) {
		b, err := cbytes("broadcast", "buf", buf, int64(nbytes))
		if err != nil {
			return nil, err
		}
		return g.Broadcast(b, int(root))
	})
}

//export mc_pg_allreduce
func mc_pg_allreduce(h C.uint64_t, buf unsafe.Pointer, count C.int64_t, dtype C.int32_t, rop C.int32_t, work *C.uint64_t) C.int {
	return pgOp(h, "all_reduce", work, func(g *pg.Group) (*worker.Work, error) {
		b, dt, o, err := reduceArgs("all_reduce", "buf", buf, count, dtype, rop)
		if err != nil {
			return nil, err
		}
		return g.AllReduce(b, dt, o)
	})
}

//export mc_pg_reduce
func mc_pg_reduce(h C.uint64_t, buf unsafe.Pointer, count C.int64_t, dtype C.int32_t, rop C.int32_t, root C.int32_t, work *C.uint64_t) C.int {
	return pgOp(h, "reduce", work, func(g *pg.Group) (*worker.Work, error) {
		b, dt, o, err := reduceArgs("reduce", "buf", buf, count, dtype, rop)
		if err != nil {
			return nil, err
		}
		return g.Reduce(b, dt, o, int(root))
	})
}

//export mc_pg_allgather
func mc_pg_allgather(h C.uint64_t, in unsafe.Pointer, nbytes C.int64_t, outs unsafe.Pointer, n C.int32_t, work *C.uint64_t) C.int {
	const op = "all_gather"
	return pgOp(h, op, work, func(g *pg.Group) (*worker.Work, error) {
		b, err := cbytes(op, "in", in, int64(nbytes))
		if err != nil {
			return nil, err
		}
		bs, err := cbufs(op, "outs", outs, int(n), int64(nbytes))
		if err != nil {
			return nil, err
		}
		return g.AllGather(b, bs)
	})
}

// rootBufs converts the buffer list that only the root of a gather or scatter passes.
func rootBufs(g *pg.Group, op, what string, arr unsafe.Pointer, count C.int32_t, root C.int32_t, n int64) ([][]byte, error) {
	if int(root) != g.Rank() {
		return nil, nil
	}
	return cbufs(op, what, arr, int(count), n)
}

//export mc_pg_gather
func mc_pg_gather(h C.uint64_t, in unsafe.Pointer, nbytes C.int64_t, outs unsafe.Pointer, n C.int32_t, root C.int32_t, work *C.uint64_t) C.int {
	const op = "gather"
	return pgOp(h, op, work, func(g *pg.Group) (*worker.Work, error) {
		b, err := cbytes(op, "in", in, int64(nbytes))
		if err != nil {
			return nil, err
		}
		bs, err := rootBufs(g, op, "outs", outs, n, root, int64(nbytes))
		if err != nil {
			return nil, err
		}
		return g.Gather(b, bs, int(root))
	})
}

//export mc_pg_scatter
func mc_pg_scatter(h C.uint64_t, ins unsafe.Pointer, n C.int32_t, out unsafe.Pointer, nbytes C.int64_t, root C.int32_t, work *C.uint64_t) C.int {
	const op = "scatter"
	return pgOp(h, op, work, func(g *pg.Group) (*worker.Work, error) {
		b, err := cbytes(op, "out", out, int64(nbytes))
		if err != nil {
			return nil, err
		}
		bs, err := rootBufs(g, op, "ins", ins, n, root, int64(nbytes))
		if err != nil {
			return nil, err
		}
		return g.Scatter(bs, b, int(root))
	})
}

//export mc_pg_reduce_scatter
func mc_pg_reduce_scatter(h C.uint64_t, ins unsafe.Pointer, n C.int32_t, out unsafe.Pointer, count C.int64_t, dtype C.int32_t, rop C.int32_t, work *C.uint64_t) C.int {
	const op = "reduce_scatter"
	return pgOp(h, op, work, func(g *pg.Group) (*worker.Work, error) {
		b, dt, o, err := reduceArgs(op, "out", out, count, dtype, rop)
		if err != nil {
			return nil, err
		}
		bs, err := cbufs(op, "ins", ins, int(n), int64(len(b)))
		if err != nil {
			return nil, err
		}
		return g.ReduceScatter(bs, b, dt, o)
	})
}

//export mc_pg_alltoall
func mc_pg_alltoall(h C.uint64_t, ins unsafe.Pointer, inBytes *C.int64_t, outs unsafe.Pointer, outBytes *C.int64_t, count C.int32_t, work *C.uint64_t) C.int {
	const op = "all_to_all"
	return pgOp(h, op, work, func(g *pg.Group) (*worker.Work, error) {
		if ins == nil || outs == nil || inBytes == nil || outBytes == nil {
			return nil, invalid(op + ": ins, in_bytes, outs and out_bytes must not be NULL")
		}
		n := int(count)
		if n < 0 || n > g.MaxSize() {
			return nil, invalid(fmt.Sprintf("%s: %d buffers for a group of %d slots", op, n, g.MaxSize()))
		}
		ib := unsafe.Slice((*int64)(unsafe.Pointer(inBytes)), n)
		ob := unsafe.Slice((*int64)(unsafe.Pointer(outBytes)), n)
		ip := unsafe.Slice((*unsafe.Pointer)(ins), n)
		opp := unsafe.Slice((*unsafe.Pointer)(outs), n)
		bi, bo := make([][]byte, n), make([][]byte, n)
		var err error
		for i := 0; i < n; i++ {
			if bi[i], err = cbytes(op, fmt.Sprintf("ins[%d]", i), ip[i], ib[i]); err != nil {
				return nil, err
			}
			if bo[i], err = cbytes(op, fmt.Sprintf("outs[%d]", i), opp[i], ob[i]); err != nil {
				return nil, err
			}
		}
		return g.AllToAll(bi, bo)
	})
}

//export mc_pg_send
func mc_pg_send(h C.uint64_t, buf unsafe.Pointer, nbytes C.int64_t, dst C.int32_t, tag C.int32_t, work *C.uint64_t) C.int {
	return pgOp(h, "send", work, func(g *pg.Group) (*worker.Work, error) {
		b, err := cbytes("send", "buf", buf, int64(nbytes))
		if err != nil {
			return nil, err
		}
		return g.Send(b, int(dst), int32(tag))
	})
}

//export mc_pg_recv
func mc_pg_recv(h C.uint64_t, buf unsafe.Pointer, nbytes C.int64_t, src C.int32_t, tag C.int32_t, work *C.uint64_t) C.int {
	return pgOp(h, "recv", work, func(g *pg.Group) (*worker.Work, error) {
		b, err := cbytes("recv", "buf", buf, int64(nbytes))
		if err != nil {
			return nil, err
		}
		return g.Recv(b, int(src), int32(tag))
	})
}

//export mc_pg_barrier
func mc_pg_barrier(h C.uint64_t, work *C.uint64_t) C.int {
	return pgOp(h, "barrier", work, func(g *pg.Group) (*worker.Work, error) { return g.Barrier() })
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
	return setErr(pg.Coded(err))
}

// workBool answers 1 or 0 for a work's predicate.
func workBool(h C.uint64_t, f func(w *worker.Work) bool) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	if f(wr.w) {
		return 1
	}
	return 0
}

//export mc_work_test
func mc_work_test(h C.uint64_t) C.int { return workBool(h, (*worker.Work).Completed) }

//export mc_work_run
func mc_work_run(h C.uint64_t) C.int { return workBool(h, (*worker.Work).RunHere) }

//export mc_work_start
func mc_work_start(h C.uint64_t) C.int {
	if rc := workBool(h, func(w *worker.Work) bool { w.Start(); return true }); rc < 0 {
		return rc
	}
	return 0
}

//export mc_work_is_success
func mc_work_is_success(h C.uint64_t) C.int {
	return workBool(h, func(w *worker.Work) bool {
		return w.Completed() && w.Err() == nil && len(w.FailedRanks()) == 0
	})
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

// rankFlags writes 1 for each rank in ranks and 0 elsewhere into the n int32 flags at out.
func rankFlags(name string, out *C.int32_t, n C.int32_t, set func(r int) bool) C.int {
	if n < 0 || (n > 0 && out == nil) {
		return setErr(invalid(name + ": out is NULL or n is negative"))
	}
	flags := unsafe.Slice((*int32)(unsafe.Pointer(out)), int(n))
	for i := range flags {
		flags[i] = 0
		if set(i) {
			flags[i] = 1
		}
	}
	return 0
}

//export mc_work_failed_ranks
func mc_work_failed_ranks(h C.uint64_t, out *C.int32_t, n C.int32_t) C.int {
	wr, err := workOf(h)
	if err != nil {
		return setErr(err)
	}
	failed := wr.w.FailedRanks()
	return rankFlags("mc_work_failed_ranks", out, n, func(r int) bool { return slices.Contains(failed, r) })
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
	ph, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	act := ph.g.ActiveRanks()
	return rankFlags("mc_pg_get_active_ranks", out, n, func(r int) bool { return r < len(act) && act[r] })
}

//export mc_pg_max_group_size
func mc_pg_max_group_size(h C.uint64_t) C.int32_t {
	ph, err := pgOf(h)
	if err != nil {
		return C.int32_t(setErr(err))
	}
	return C.int32_t(ph.g.MaxSize())
}

//export mc_pg_active_count
func mc_pg_active_count(h C.uint64_t) C.int32_t {
	ph, err := pgOf(h)
	if err != nil {
		return C.int32_t(setErr(err))
	}
	return C.int32_t(ph.g.ActiveCount())
}

//export mc_pg_current_epoch
func mc_pg_current_epoch(h C.uint64_t) C.int64_t {
	ph, err := pgOf(h)
	if err != nil {
		return C.int64_t(setErr(err))
	}
	return C.int64_t(ph.g.CurrentEpoch())
}

//export mc_pg_membership
func mc_pg_membership(h C.uint64_t, request *C.char, out *C.char, outlen C.int32_t) C.int {
	ph, err := pgOf(h)
	if err != nil {
		return setErr(err)
	}
	if request == nil {
		return setErr(invalid("mc_pg_membership: request is NULL"))
	}
	var req pg.Request
	if err := json.Unmarshal([]byte(C.GoString(request)), &req); err != nil {
		return setErr(invalid(fmt.Sprintf("mc_pg_membership: malformed request: %v", err)))
	}
	res, err := ph.g.Membership(req)
	if err != nil {
		return setErr(err)
	}
	b, _ := json.Marshal(res)
	return copyOut(string(b), out, C.int(outlen))
}

// transferCheck wraps the shim's transfer-status seam (mc_pg_config.transfer_check) for
// pg.Options.TransferCheck: the ranks whose transfers it reports failed.
func transferCheck(fn C.mc_pg_transfer_check_fn, ctx unsafe.Pointer) func(ranks []int, n int) ([]int, error) {
	return func(ranks []int, n int) ([]int, error) {
		if len(ranks) == 0 {
			return nil, nil
		}
		cr := make([]C.int32_t, len(ranks))
		cl := make([]C.uint64_t, len(ranks))
		cf := make([]C.int32_t, len(ranks))
		for i, r := range ranks {
			cr[i], cl[i] = C.int32_t(r), C.uint64_t(n)
		}
		rc := C.mc_pg_call_transfer_check(fn, ctx, &cr[0], &cl[0], C.int32_t(len(ranks)), &cf[0])
		var failed []int
		for i, f := range cf {
			if f != 0 {
				failed = append(failed, ranks[i])
			}
		}
		if rc != 0 {
			// The seam printed why on stderr; pg logs what it does about it.
			return failed, fmt.Errorf("the transfer seam failed (code %d) reporting transfers to ranks %v", int(rc), ranks)
		}
		return failed, nil
	}
}
