// MooncakeBackend::Op's bridge from tensors to the C ABI: staging tensors into contiguous host
// buffers (pinned copies for CUDA tensors), one mc_pg_* call per builder, and submission
// (launch): on the calling thread for CPU tensors, through the submit thread for CUDA ones.
#include "op.hpp"

#include <c10/util/Exception.h>

#include "util.hpp"

namespace mooncake {

namespace {

const char* opNameOf(c10d::OpType t) {
  switch (t) {
    case c10d::OpType::BROADCAST: return "broadcast";
    case c10d::OpType::ALLREDUCE: return "allreduce";
    case c10d::OpType::ALLREDUCE_COALESCED: return "allreduce_coalesced";
    case c10d::OpType::REDUCE: return "reduce";
    case c10d::OpType::ALLGATHER: return "allgather";
    case c10d::OpType::_ALLGATHER_BASE: return "_allgather_base";
    case c10d::OpType::ALLGATHER_COALESCED: return "allgather_coalesced";
    case c10d::OpType::GATHER: return "gather";
    case c10d::OpType::SCATTER: return "scatter";
    case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "_reduce_scatter_base";
    case c10d::OpType::ALLTOALL_BASE: return "alltoall_base";
    case c10d::OpType::ALLTOALL: return "alltoall";
    case c10d::OpType::SEND: return "send";
    case c10d::OpType::RECV: return "recv";
    case c10d::OpType::RECVANYSOURCE: return "recvAnysource";
    case c10d::OpType::BARRIER: return "barrier";
    default: return "op";
  }
}

// count pointers into t, one every `stride` bytes from the start (t itself when it is empty).
template <typename T>
Ptrs<T> slices(const at::Tensor& t, int64_t stride, int count) {
  auto p = std::make_shared<std::vector<T*>>();
  for (int r = 0; r < count; ++r) {
    p->push_back(stride == 0 ? ptrOf(t) : static_cast<uint8_t*>(t.data_ptr()) + r * stride);
  }
  return p;
}

} // namespace

MooncakeBackend::Op::Op(MooncakeBackend* b, c10d::OpType type)
    : b_(b), pg_(b->pg_), type_(type), name_(opNameOf(type)) {
  b_->refreshSize();
}

Ptrs<const void> MooncakeBackend::Op::ins(const std::vector<at::Tensor>& ts) {
  auto p = std::make_shared<std::vector<const void*>>();
  for (auto& t : ts) {
    p->push_back(ptrOf(in(t)));
  }
  return p;
}

Ptrs<void> MooncakeBackend::Op::outs(const std::vector<at::Tensor>& ts) {
  auto p = std::make_shared<std::vector<void*>>();
  for (auto& t : ts) {
    p->push_back(ptrOf(out(t)));
  }
  return p;
}

// ---------------------------------------------------------------- calls

void MooncakeBackend::Op::broadcast(const at::Tensor& buf, int32_t root) {
  void* p = ptrOf(buf);
  int64_t n = nbytesOf(buf);
  uint64_t pg = pg_;
  call([=](uint64_t* h) { return mc_pg_broadcast(pg, p, n, root, h); });
}

void MooncakeBackend::Op::allreduce(const at::Tensor& buf, ReduceArgs ra) {
  void* p = ptrOf(buf);
  uint64_t pg = pg_;
  call([=](uint64_t* h) { return mc_pg_allreduce(pg, p, ra.count, ra.dtype, ra.op, h); });
}

void MooncakeBackend::Op::reduce(const at::Tensor& buf, ReduceArgs ra, int32_t root) {
  void* p = ptrOf(buf);
  uint64_t pg = pg_;
  call([=](uint64_t* h) { return mc_pg_reduce(pg, p, ra.count, ra.dtype, ra.op, root, h); });
}

void MooncakeBackend::Op::allgather(const at::Tensor& in, Ptrs<void> outs) {
  const void* ip = ptrOf(in);
  int64_t n = nbytesOf(in);
  uint64_t pg = pg_;
  int32_t k = static_cast<int32_t>(outs->size());
  call([=](uint64_t* h) { return mc_pg_allgather(pg, ip, n, outs->data(), k, h); });
}

void MooncakeBackend::Op::allgatherInto(const at::Tensor& out, const at::Tensor& in) {
  at::Tensor sin = this->in(in);
  at::Tensor sout = this->out(out);
  allgather(sin, slices<void>(sout, nbytesOf(sin), parts(sout, sin)));
}

void MooncakeBackend::Op::gather(const at::Tensor& in, Ptrs<void> outs, int32_t root) {
  const void* ip = ptrOf(in);
  int64_t n = nbytesOf(in);
  uint64_t pg = pg_;
  int32_t k = static_cast<int32_t>(outs->size());
  call([=](uint64_t* h) {
    return mc_pg_gather(pg, ip, n, outs->empty() ? nullptr : outs->data(), k, root, h);
  });
}

void MooncakeBackend::Op::scatter(Ptrs<const void> ins, const at::Tensor& out, int32_t root) {
  void* o = ptrOf(out);
  int64_t n = nbytesOf(out);
  uint64_t pg = pg_;
  int32_t k = static_cast<int32_t>(ins->size());
  call([=](uint64_t* h) {
    return mc_pg_scatter(pg, ins->empty() ? nullptr : ins->data(), k, o, n, root, h);
  });
}

void MooncakeBackend::Op::reduceScatter(
    Ptrs<const void> ins, const at::Tensor& out, ReduceArgs ra) {
  void* o = ptrOf(out);
  uint64_t pg = pg_;
  int32_t k = static_cast<int32_t>(ins->size());
  call([=](uint64_t* h) {
    return mc_pg_reduce_scatter(pg, ins->data(), k, o, ra.count, ra.dtype, ra.op, h);
  });
}

void MooncakeBackend::Op::reduceScatterFrom(
    const at::Tensor& out, const at::Tensor& in, ReduceArgs ra) {
  at::Tensor sin = this->in(in);
  at::Tensor sout = this->out(out);
  reduceScatter(slices<const void>(sin, nbytesOf(sout), parts(sin, sout)), sout, ra);
}

void MooncakeBackend::Op::alltoall(
    Ptrs<const void> ins, std::vector<int64_t> inBytes, Ptrs<void> outs,
    std::vector<int64_t> outBytes) {
  auto ib = std::make_shared<std::vector<int64_t>>(std::move(inBytes));
  auto ob = std::make_shared<std::vector<int64_t>>(std::move(outBytes));
  uint64_t pg = pg_;
  call([=](uint64_t* h) {
    return mc_pg_alltoall(
        pg, ins->data(), ib->data(), outs->data(), ob->data(), static_cast<int32_t>(ib->size()), h);
  });
}

void MooncakeBackend::Op::send(const at::Tensor& buf, int dst, int tag) {
  const void* p = ptrOf(buf);
  int64_t n = nbytesOf(buf);
  uint64_t pg = pg_;
  call([=](uint64_t* h) { return mc_pg_send(pg, p, n, dst, tag, h); });
}

void MooncakeBackend::Op::recv(const at::Tensor& buf, int src, int tag) {
  void* p = ptrOf(buf);
  int64_t n = nbytesOf(buf);
  uint64_t pg = pg_;
  call([=](uint64_t* h) { return mc_pg_recv(pg, p, n, src, tag, h); });
}

void MooncakeBackend::Op::barrier() {
  uint64_t pg = pg_;
  call([=](uint64_t* h) { return mc_pg_barrier(pg, h); });
}

// ---------------------------------------------------------------- staging and submission

c10::intrusive_ptr<c10d::Work> MooncakeBackend::Op::launch(std::vector<at::Tensor> outputs) {
  std::vector<c10::Device> futDevices;
  if (staged()) {
    futDevices.push_back(device_);
  }
  auto w = c10::make_intrusive<MooncakeWork>(*b_, type_, name_, outputs, futDevices);
  w->keep_ = std::move(keep_);
  for (auto& t : outputs) {
    w->keep_.push_back(t);
  }
  w->post_ = std::move(post_);
  TORCH_CHECK(!b_->closed_.load(), where(), ": the process group was destroyed");
  if (!b_->cuda_) {
    return launchCpu(w);
  }
  return launchCuda(w);
}

at::Tensor MooncakeBackend::Op::stage(const at::Tensor& t, bool read, bool write) {
  if (!t.device().is_cuda()) {
    if (t.is_contiguous()) {
      keep_.push_back(t);
      return t;
    }
    at::Tensor c = read ? t.contiguous() : at::empty(t.sizes(), t.options());
    keep_.push_back(c);
    if (write) {
      at::Tensor dst = t;
      post_.push_back([dst, c]() mutable { dst.copy_(c); });
    }
    return c;
  }
#ifdef MOONCAKE_WITH_CUDA
  // Pinned host copy. Outputs are staged like inputs so a failed op leaves them unchanged.
  at::Tensor h = at::empty(
      t.sizes(), t.options().device(at::kCPU).pinned_memory(true),
      at::MemoryFormat::Contiguous);
  if (t.numel() > 0 && (read || write)) {
    h.copy_(t, /*non_blocking=*/true);
  }
  keep_.push_back(h);
  keep_.push_back(t);
  if (write) {
    h2d_.emplace_back(t, h);
  }
  return h;
#else
  TORCH_CHECK(false, where(), ": this build has no CUDA support");
#endif
}

void MooncakeBackend::Op::submit(
    const std::vector<std::function<int(uint64_t*)>>& calls, MooncakeWork& w,
    MooncakeBackend* b, const char* name) {
  for (auto& fn : calls) {
    uint64_t h = 0;
    if (fn(&h) != 0) {
      w.submitError_ = b->where(name) + ": " + lastError();
      return;
    }
    w.handles_.push_back(h);
  }
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::Op::launchCpu(
    const c10::intrusive_ptr<MooncakeWork>& w) {
  submit(calls_, *w, b_, name_);
  if (!w->submitError_.empty()) {
    std::string err = w->submitError_;
    if (!w->handles_.empty()) {
      b_->enqueueCompletion(w);  // keeps the submitted parts' buffers alive
    }
    TORCH_CHECK(false, err);
  }
  w->backend_ = b_;
  static const bool runInline = envOn("MOONCAKE_PG_RUN_INLINE");
  if (sync_ && runInline && w->finishHere()) {
    return w;  // not queued for the completion thread: nothing to forget
  }
  for (uint64_t h : w->handles_) {
    mc_work_start(h);
  }
  b_->enqueueCompletion(w, /*notify=*/false);
  return w;
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::Op::launchCuda(
    const c10::intrusive_ptr<MooncakeWork>& w) {
  std::function<void()> inputsCopied;  // waits for the inputs' device->host copies
#ifdef MOONCAKE_WITH_CUDA
  if (staged()) {
    inputsCopied = w->stageCuda(*b_, device_, std::move(h2d_));
  }
#endif
  auto calls = std::move(calls_);
  MooncakeBackend* b = b_;
  const char* name = name_;
  {
    std::lock_guard<std::mutex> g(b->smu_);
    b->submits_.push_back([b, w, calls, name, inputsCopied]() {
      if (inputsCopied) {
        inputsCopied();
      }
      submit(calls, *w, b, name);
      b->enqueueCompletion(w);
    });
  }
  b->scv_.notify_one();
  return w;
}

} // namespace mooncake
