package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
)

var (
	engines handles[*engine.Engine]

	// procEngine is the one process-wide engine shared by process groups and the store: the
	// first engine the process creates, or one made from the environment on first need.
	procMu     sync.Mutex
	procEngine *engine.Engine
)

// processEngine returns the process-wide engine, creating it from the knobs read now
// (config.ProcessEngine: MC_METADATA_SERVER, default P2PHANDSHAKE; MOONCAKE_PROTOCOL, default
// tcp; MOONCAKE_DEVICE; MC_LOCAL_HOSTNAME, default: the host's first non-loopback IPv4 address,
// so peers on other hosts can reach it; and the engine-creation knobs) when none exists yet.
func processEngine() (*engine.Engine, error) {
	return sharedEngine(config.ProcessEngine)
}

// sharedEngine returns the process-wide engine, creating it with the configuration cfg
// returns (called only when there is none yet) .
func sharedEngine(cfg func() engine.Config) (*engine.Engine, error) {
	procMu.Lock()
	defer procMu.Unlock()
	if procEngine != nil {
		return procEngine, nil
	}
	e, err := engine.New(context.Background(), cfg())
	if err != nil {
		return nil, fmt.Errorf("starting the process-wide transfer engine: %w", err)
	}
	procEngine = e
	return e, nil
}

// withEngine runs f on the engine of h and returns its status.
func withEngine(h C.uint64_t, f func(e *engine.Engine) error) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	return setErr(f(e))
}

// engineOut runs f on the engine of h and stores its result in *out; what names out in the
// error when it is NULL. *out is left alone when f fails.
func engineOut(h C.uint64_t, what string, out *C.uint64_t, f func(e *engine.Engine) (uint64, error)) C.int {
	if out == nil {
		if _, err := engineOf(h); err != nil {
			return setErr(err)
		}
		return setErr(invalid(what + " is NULL"))
	}
	return withEngine(h, func(e *engine.Engine) error {
		v, err := f(e)
		if err == nil {
			*out = C.uint64_t(v)
		}
		return err
	})
}

func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

func engineOf(h C.uint64_t) (*engine.Engine, error) {
	e, ok := engines.get(uint64(h))
	if !ok {
		return nil, invalid(fmt.Sprintf("unknown engine handle %d", uint64(h)))
	}
	return e, nil
}

//export mc_engine_create
func mc_engine_create(local, meta, proto, dev *C.char, out *C.uint64_t) C.int {
	if out == nil {
		return setErr(invalid("mc_engine_create: out is NULL"))
	}
	cfg := engine.Config{
		LocalServerName: goString(local),
		MetadataServer:  goString(meta),
		Protocol:        goString(proto),
		DeviceName:      goString(dev),
	}
	if cfg.MetadataServer == "" {
		cfg.MetadataServer = engine.P2PHandshake
	}
	e, err := engine.New(context.Background(), config.Engine(cfg))
	if err != nil {
		return setErr(err)
	}
	procMu.Lock()
	if procEngine == nil {
		procEngine = e
	}
	procMu.Unlock()
	*out = C.uint64_t(engines.put(e))
	return 0
}

//export mc_engine_destroy
func mc_engine_destroy(h C.uint64_t) C.int {
	e, ok := engines.take(uint64(h))
	if !ok {
		return setErr(invalid(fmt.Sprintf("unknown engine handle %d", uint64(h))))
	}
	procMu.Lock()
	shared := procEngine == e
	procMu.Unlock()
	if shared {
		// Process groups or the store may still use it; it lives until the process exits.
		return 0
	}
	return setErr(e.Close())
}

//export mc_engine_rpc_port
func mc_engine_rpc_port(h C.uint64_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	return C.int(e.RPCPort())
}

//export mc_engine_segment_name
func mc_engine_segment_name(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	return copyOut(e.SegmentName(), buf, C.int(buflen))
}

//export mc_engine_register
func mc_engine_register(h C.uint64_t, addr, length C.uint64_t, loc *C.char) C.int {
	return withEngine(h, func(e *engine.Engine) error {
		return e.RegisterLocalMemory(uintptr(addr), uint64(length), goString(loc))
	})
}

//export mc_engine_unregister
func mc_engine_unregister(h C.uint64_t, addr C.uint64_t) C.int {
	return withEngine(h, func(e *engine.Engine) error { return e.UnregisterLocalMemory(uintptr(addr)) })
}

//export mc_engine_register_batch
func mc_engine_register_batch(h C.uint64_t, addrs, lens *C.uint64_t, n C.int32_t, loc *C.char) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	if n < 0 || (n > 0 && (addrs == nil || lens == nil)) {
		return setErr(invalid("mc_engine_register_batch: bad arrays"))
	}
	a := unsafe.Slice((*uint64)(unsafe.Pointer(addrs)), int(n))
	l := unsafe.Slice((*uint64)(unsafe.Pointer(lens)), int(n))
	bufs := make([]engine.Buffer, n)
	for i := range bufs {
		bufs[i] = engine.Buffer{Addr: uintptr(a[i]), Length: l[i]}
	}
	return setErr(e.RegisterLocalMemoryBatch(bufs, goString(loc)))
}

//export mc_engine_unregister_batch
func mc_engine_unregister_batch(h C.uint64_t, addrs *C.uint64_t, n C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	if n < 0 || (n > 0 && addrs == nil) {
		return setErr(invalid("mc_engine_unregister_batch: bad arrays"))
	}
	a := unsafe.Slice((*uint64)(unsafe.Pointer(addrs)), int(n))
	out := make([]uintptr, n)
	for i := range out {
		out[i] = uintptr(a[i])
	}
	return setErr(e.UnregisterLocalMemoryBatch(out))
}

//export mc_engine_allocate_shared
func mc_engine_allocate_shared(h C.uint64_t, length C.uint64_t, addr *C.uint64_t) C.int {
	return engineOut(h, "mc_engine_allocate_shared: addr", addr, func(e *engine.Engine) (uint64, error) {
		a, err := e.AllocateShared(uint64(length))
		return uint64(a), err
	})
}

//export mc_engine_free_shared
func mc_engine_free_shared(h C.uint64_t, addr C.uint64_t) C.int {
	return withEngine(h, func(e *engine.Engine) error { return e.FreeShared(uintptr(addr)) })
}

//export mc_engine_open_segment
func mc_engine_open_segment(h C.uint64_t, name *C.char, seg *C.uint64_t) C.int {
	return engineOut(h, "mc_engine_open_segment: segment", seg, func(e *engine.Engine) (uint64, error) {
		id, err := e.OpenSegment(goString(name))
		return uint64(id), err
	})
}

//export mc_engine_first_buffer
func mc_engine_first_buffer(h C.uint64_t, seg C.uint64_t, addr *C.uint64_t) C.int {
	return engineOut(h, "mc_engine_first_buffer: addr", addr, func(e *engine.Engine) (uint64, error) {
		d, err := e.SegmentDescriptor(engine.SegmentID(seg))
		if err != nil || len(d.Buffers) == 0 {
			return 0, err
		}
		return d.Buffers[0].Addr, nil
	})
}

//export mc_engine_allocate_batch
func mc_engine_allocate_batch(h C.uint64_t, capacity C.int32_t, batch *C.uint64_t) C.int {
	return engineOut(h, "mc_engine_allocate_batch: batch", batch, func(e *engine.Engine) (uint64, error) {
		b, err := e.AllocateBatchID(int(capacity))
		return uint64(b), err
	})
}

//export mc_engine_submit
func mc_engine_submit(h C.uint64_t, batch C.uint64_t, n C.int32_t, ops *C.int32_t, srcs, segs, targets, lens *C.uint64_t, nname, nmsg *C.char) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	if n < 0 || (n > 0 && (ops == nil || srcs == nil || segs == nil || targets == nil || lens == nil)) {
		return setErr(invalid("mc_engine_submit: bad request arrays"))
	}
	o := unsafe.Slice((*int32)(unsafe.Pointer(ops)), int(n))
	s := unsafe.Slice((*uint64)(unsafe.Pointer(srcs)), int(n))
	g := unsafe.Slice((*uint64)(unsafe.Pointer(segs)), int(n))
	t := unsafe.Slice((*uint64)(unsafe.Pointer(targets)), int(n))
	l := unsafe.Slice((*uint64)(unsafe.Pointer(lens)), int(n))
	reqs := make([]engine.TransferRequest, n)
	for i := range reqs {
		reqs[i] = engine.TransferRequest{
			Opcode: engine.Opcode(o[i]), Source: uintptr(s[i]), TargetID: engine.SegmentID(g[i]),
			TargetOffset: t[i], Length: l[i],
		}
	}
	if nname != nil || nmsg != nil {
		return setErr(e.SubmitTransferWithNotify(engine.BatchID(batch), reqs,
			engine.Notify{Name: goString(nname), Msg: goString(nmsg)}))
	}
	return setErr(e.SubmitTransfer(engine.BatchID(batch), reqs))
}

//export mc_engine_task_status
func mc_engine_task_status(h C.uint64_t, batch C.uint64_t, task C.int32_t, status *C.int32_t, transferred *C.uint64_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	st, err := e.GetTransferStatus(engine.BatchID(batch), int(task))
	if err != nil {
		return setErr(err)
	}
	if status != nil {
		*status = C.int32_t(st.Status)
	}
	if transferred != nil {
		*transferred = C.uint64_t(st.TransferredBytes)
	}
	return 0
}

//export mc_engine_batch_status
func mc_engine_batch_status(h C.uint64_t, batch C.uint64_t, status *C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	st, err := e.GetBatchStatus(engine.BatchID(batch))
	if err != nil {
		return setErr(err)
	}
	if status != nil {
		*status = C.int32_t(st)
	}
	return 0
}

//export mc_engine_wait_batch
func mc_engine_wait_batch(h C.uint64_t, batch C.uint64_t, timeoutMS C.int64_t, status *C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	ctx := context.Background()
	if timeoutMS >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
		defer cancel()
	}
	st, err := e.WaitBatch(ctx, engine.BatchID(batch))
	if status != nil {
		*status = C.int32_t(st)
	}
	return setErr(err)
}

//export mc_engine_free_batch
func mc_engine_free_batch(h C.uint64_t, batch C.uint64_t) C.int {
	return withEngine(h, func(e *engine.Engine) error { return e.FreeBatchID(engine.BatchID(batch)) })
}

//export mc_engine_send_notify
func mc_engine_send_notify(h C.uint64_t, seg C.uint64_t, name, msg *C.char) C.int {
	return withEngine(h, func(e *engine.Engine) error {
		return e.SendNotify(engine.SegmentID(seg), engine.Notify{Name: goString(name), Msg: goString(msg)})
	})
}

// pendingNotifies keeps notifications drained from an engine that did not fit the caller's
// buffer, per engine handle, so none is lost.
var (
	notifyMu       sync.Mutex
	pendingNotices = map[uint64][]engine.Notify{}
)

//export mc_engine_get_notifies
func mc_engine_get_notifies(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	notifyMu.Lock()
	defer notifyMu.Unlock()
	all := append(pendingNotices[uint64(h)], e.GetNotifies()...)
	type note struct {
		Name string `json:"name"`
		Msg  string `json:"msg"`
	}
	out := make([]note, len(all))
	for i, n := range all {
		out[i] = note{n.Name, n.Msg}
	}
	js, _ := json.Marshal(out)
	if int(buflen) <= len(js) {
		pendingNotices[uint64(h)] = all
		return C.int(len(js))
	}
	delete(pendingNotices, uint64(h))
	return copyOut(string(js), buf, C.int(buflen))
}

//export mc_engine_probe
func mc_engine_probe(h C.uint64_t, name *C.char) C.int {
	return withEngine(h, func(e *engine.Engine) error { return e.ProbePeer(goString(name)) })
}

//export mc_engine_topology
func mc_engine_topology(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	return copyOut(e.GetLocalTopology(), buf, C.int(buflen))
}

//export mc_engine_transport_bytes
func mc_engine_transport_bytes(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	js, _ := json.Marshal(e.TransportBytes())
	return copyOut(string(js), buf, C.int(buflen))
}
