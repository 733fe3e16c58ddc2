#include "mooncake_backend.hpp"

#include <ATen/ATen.h>
#include <Python.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>

#ifdef MOONCAKE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>
#endif

namespace mooncake {

namespace {

using Clock = std::chrono::steady_clock;

// A valid address for zero-byte buffers (the C ABI may reject NULL).
alignas(64) uint8_t kEmpty[64];

void* ptrOf(const at::Tensor& t) {
  return t.numel() == 0 ? static_cast<void*>(kEmpty) : t.data_ptr();
}

int64_t nbytesOf(const at::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

std::string lastError() {
  const char* e = mooncake_last_error();
  return (e && *e) ? std::string(e) : std::string("unknown error");
}

// ---------------------------------------------------------------- store trampolines

int storeSet(void* ctx, const char* key, const uint8_t* val, size_t len) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    b->store->set(std::string(key), std::vector<uint8_t>(val, val + len));
    return 0;
  } catch (...) {
    return -3;
  }
}

int storeCheck(void* ctx, const char* key) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    return b->store->check({std::string(key)}) ? 1 : 0;
  } catch (...) {
    return -3;
  }
}

// Polls with check() instead of Store::wait so a long wait never holds a client connection's
// lock (TCPStore serialises operations per client) while other Go threads need the store.
int storeGet(void* ctx, const char* key, int64_t timeoutMs, uint8_t** val, size_t* len) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    std::string k(key);
    auto deadline = Clock::now() +
        (timeoutMs < 0 ? b->store->getTimeout()
                       : std::chrono::milliseconds(timeoutMs));
    auto sleep = std::chrono::microseconds(200);
    while (!b->store->check({k})) {
      if (Clock::now() >= deadline) {
        return -1;
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
    }
    std::vector<uint8_t> v = b->store->get(k);
    uint8_t* out = static_cast<uint8_t*>(std::malloc(v.empty() ? 1 : v.size()));
    if (!out) {
      return -3;
    }
    if (!v.empty()) {
      std::memcpy(out, v.data(), v.size());
    }
    *val = out;
    *len = v.size();
    return 0;
  } catch (const c10::DistStoreError&) {
    return -1;
  } catch (...) {
    return -3;
  }
}

int storeAdd(void* ctx, const char* key, int64_t delta, int64_t* out) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    int64_t v = b->store->add(std::string(key), delta);
    if (out) {
      *out = v;
    }
    return 0;
  } catch (...) {
    return -3;
  }
}

const char* opNameOf(c10d::OpType t) {
  switch (t) {
    case c10d::OpType::BROADCAST: return "broadcast";
    case c10d::OpType::ALLREDUCE: return "allreduce";
    case c10d::OpType::ALLREDUCE_COALESCED: return "allreduce_coalesced";
    case c10d::OpType::REDUCE: return "reduce";
    case c10d::OpType::ALLGATHER: return "allgather";
    case c10d::OpType::_ALLGATHER_BASE: return "_allgather_base";
    case c10d::OpType::ALLGATHER_COALESCED: return "allgather_coalesced";
    case c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED: return "allgather_into_tensor_coalesced";
    case c10d::OpType::GATHER: return "gather";
    case c10d::OpType::SCATTER: return "scatter";
    case c10d::OpType::REDUCE_SCATTER: return "reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE: return "_reduce_scatter_base";
    case c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED: return "reduce_scatter_tensor_coalesced";
    case c10d::OpType::ALLTOALL_BASE: return "alltoall_base";
    case c10d::OpType::ALLTOALL: return "alltoall";
    case c10d::OpType::SEND: return "send";
    case c10d::OpType::RECV: return "recv";
    case c10d::OpType::RECVANYSOURCE: return "recvAnysource";
    case c10d::OpType::BARRIER: return "barrier";
    default: return "op";
  }
}

// dtype codes the reduction kernels accept (c10::ScalarType values).
bool reducibleDtype(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kHalf: case at::kFloat: case at::kDouble: case at::kBool: case at::kBFloat16:
      return true;
    default:
      return false;
  }
}

} // namespace

StoreBridge::StoreBridge(c10::intrusive_ptr<c10d::Store> s) : store(std::move(s)) {
  ops.ctx = this;
  ops.set = &storeSet;
  ops.get = &storeGet;
  ops.check = &storeCheck;
  ops.add = &storeAdd;
}

bool builtWithCuda() {
#ifdef MOONCAKE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// ---------------------------------------------------------------- CUDA lane

#ifdef MOONCAKE_WITH_CUDA
namespace {
using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, uint32_t, unsigned int);

WaitValueFn waitValueFn() {
  static WaitValueFn fn = []() -> WaitValueFn {
    if (std::getenv("MOONCAKE_PG_NO_STREAM_WAIT_VALUE")) {
      return nullptr;
    }
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
      h = dlopen("libcuda.so.1", RTLD_NOW);
    }
    if (!h) {
      return nullptr;
    }
    void* f = dlsym(h, "cuStreamWaitValue32_v2");
    if (!f) {
      f = dlsym(h, "cuStreamWaitValue32");
    }
    return reinterpret_cast<WaitValueFn>(f);
  }();
  return fn;
}
} // namespace

struct CudaLane {
  c10::Device device;
  c10::cuda::CUDAStream stream;
  at::Tensor counter;  // pinned int32[1]; with UVA the host address is the device address
  uint32_t nextTicket = 1;
  bool useWaitValue = false;
  explicit CudaLane(c10::Device d)
      : device(d), stream(c10::cuda::getStreamFromPool(false, d.index())) {
    counter = at::zeros({1}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
    useWaitValue = waitValueFn() != nullptr;
  }
  void release(uint32_t ticket) {
    auto* p = reinterpret_cast<volatile uint32_t*>(counter.data_ptr());
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *p = ticket;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
};
#else
struct CudaLane {};
#endif

std::shared_ptr<CudaLane> MooncakeBackend::lane(const c10::Device& d) {
#ifdef MOONCAKE_WITH_CUDA
  std::lock_guard<std::mutex> g(laneMu_);
  auto& l = lanes_[d.index()];
  if (!l) {
    l = std::make_shared<CudaLane>(d);
  }
  return l;
#else
  TORCH_CHECK(false, "mooncake: this build has no CUDA support");
#endif
}

// ---------------------------------------------------------------- MooncakeWork

MooncakeWork::MooncakeWork(
    int rank,
    c10d::OpType opType,
    std::string opName,
    std::string backendName,
    std::vector<at::Tensor> outputs,
    std::vector<c10::Device> futureDevices,
    std::chrono::milliseconds timeout)
    : c10d::Work(rank, opType, nullptr, std::nullopt),
      opName_(std::move(opName)),
      backendName_(std::move(backendName)),
      outputs_(std::move(outputs)),
      timeout_(timeout) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::move(futureDevices));
}

MooncakeWork::~MooncakeWork() = default;

bool MooncakeWork::isCompleted() {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_;
}

bool MooncakeWork::isSuccess() const {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr MooncakeWork::exception() const {
  std::lock_guard<std::mutex> g(mutex_);
  return exception_;
}

int MooncakeWork::sourceRank() const {
  std::lock_guard<std::mutex> g(mutex_);
  TORCH_CHECK(
      completed_,
      backendName_, " ", opName_, ": sourceRank() is only valid once the work completed");
  return source_;
}

std::vector<at::Tensor> MooncakeWork::result() {
  return outputs_;
}

std::vector<int32_t> MooncakeWork::failedRanks() const {
  std::lock_guard<std::mutex> g(mutex_);
  return failed_;
}

bool MooncakeWork::localSuccess() const {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_ && localSuccess_ && !exception_;
}

std::chrono::milliseconds MooncakeWork::getTimeout() const {
  return timeout_;
}

c10::intrusive_ptr<c10::ivalue::Future> MooncakeWork::getFuture() {
  return future_;
}

void MooncakeWork::synchronize() {
#ifdef MOONCAKE_WITH_CUDA
  if (cuda_ && doneEvent_) {
    auto* ev = static_cast<at::cuda::CUDAEvent*>(doneEvent_.get());
    auto cur = c10::cuda::getCurrentCUDAStream(lane_->device.index());
    ev->block(cur);
  }
#endif
}

namespace {
// An on/off switch from the environment, on unless set to "0".
bool envOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}
}  // namespace

bool MooncakeWork::finishHere() {
  for (uint64_t h : handles_) {
    if (mc_work_run(h) < 0) {
      return false;  // freed: the completion thread finished the work already
    }
  }
  if (!partsDone() || finishClaimed_.exchange(true)) {
    return false;  // a part runs on its queue's thread: the completion thread finishes the work
  }
  backend_->finishWork(c10::intrusive_ptr<MooncakeWork>::reclaim_copy(this));
  return true;
}

void MooncakeWork::runHere() {
  static const bool enabled = envOn("MOONCAKE_PG_RUN_IN_WAIT");
  if (!enabled || backend_ == nullptr || backend_->closed_.load() || isCompleted()) {
    return;
  }
  if (finishHere()) {
    backend_->forget(this);
  }
}

bool MooncakeWork::partsDone() const {
  for (uint64_t h : handles_) {
    if (mc_work_test(h) != 1) {
      return false;
    }
  }
  return true;
}

bool MooncakeWork::wait(std::chrono::milliseconds timeout) {
  // Running the ops here blocks until they finish (bounded by the group's op timeout), so only
  // when the caller would wait at least that long anyway.
  if (timeout == kNoTimeout || timeout >= timeout_) {
    runHere();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // CUDA work: only wait until the result copies are enqueued behind the stream-side gate
  // (immediately, with stream memory operations), then order the current stream after them.
  auto ready = [&] { return cuda_ ? (eventReady_ || completed_) : completed_; };
  if (timeout == kNoTimeout) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, timeout, ready)) {
    TORCH_CHECK(
        false,
        backendName_, " ", opName_, " (rank ", rank_, "): Work.wait timed out after ",
        timeout.count(), " ms");
  }
  if (exception_) {
    std::rethrow_exception(exception_);
  }
  lock.unlock();
  synchronize();
  return true;
}

void MooncakeWork::complete(std::exception_ptr eptr) {
  {
    std::lock_guard<std::mutex> g(mutex_);
    completed_ = true;
    eventReady_ = true;
    exception_ = eptr;
  }
  cv_.notify_all();
  if (eptr) {
    future_->setErrorIfNeeded(eptr);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

// ---------------------------------------------------------------- Op builder

// Whether torch will wait on the op at once (c10d's asyncOp=False, the default of every
// collective call); false on torch versions whose options have no asyncOp.
template <typename O>
auto isSyncImpl(const O& o, int) -> decltype(o.asyncOp, bool()) {
  return !o.asyncOp;
}
template <typename O>
bool isSyncImpl(const O&, long) {
  return false;
}
template <typename O>
bool isSync(const O& o) {
  return isSyncImpl(o, 0);
}

class MooncakeBackend::Op {
 public:
  // A synchronous CPU op runs on the calling thread (torch waits for it right away): no
  // hand-off to the group's op thread and back through the completion thread.
  void setSync(bool s) { sync_ = s; }

  Op(MooncakeBackend* b, c10d::OpType type) : b_(b), type_(type), name_(opNameOf(type)) {
    b_->refreshSize();
  }

  const char* name() const { return name_; }
  std::string where() const { return b_->where(name_); }

  // Validates a tensor and fixes the op's device (all tensors of one op share a device).
  void check(const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.defined(), where(), ": ", what, " is an undefined tensor");
    TORCH_CHECK(
        !t.is_sparse(), where(), ": sparse tensors are not supported (", what, " is ",
        t.layout(), ")");
    TORCH_CHECK(
        t.layout() == at::kStrided, where(), ": only strided tensors are supported (", what,
        " has layout ", t.layout(), ")");
    const auto dev = t.device();
    if (b_->cuda_) {
      TORCH_CHECK(
          dev.is_cuda() || dev.is_cpu(), where(), ": ", what, " is on ", dev,
          "; backend 'mooncake' takes CUDA (or CPU) tensors");
    } else {
      TORCH_CHECK(
          dev.is_cpu(), where(), ": ", what, " is on ", dev,
          "; backend 'mooncake-cpu' takes CPU tensors (use backend 'mooncake' for CUDA)");
    }
    if (!deviceSet_) {
      device_ = dev;
      deviceSet_ = true;
    } else {
      TORCH_CHECK(
          device_ == dev, where(), ": all tensors must be on one device, found ", device_,
          " and ", dev);
    }
  }

  bool staged() const { return deviceSet_ && device_.is_cuda(); }

  // A contiguous host tensor holding t's data (read by the op).
  at::Tensor in(const at::Tensor& t) { return stage(t, /*read=*/true, /*write=*/false); }
  // Same, and the op's result is copied back into t.
  at::Tensor inout(const at::Tensor& t) { return stage(t, true, true); }
  // A contiguous host tensor the op writes; copied back into t.
  at::Tensor out(const at::Tensor& t) { return stage(t, false, true); }

  void call(std::function<int(uint64_t*)> fn) { calls_.push_back(std::move(fn)); }

  // Submits the calls and returns the work. outputs are what Future/result() report.
  c10::intrusive_ptr<c10d::Work> launch(std::vector<at::Tensor> outputs) {
    std::vector<c10::Device> futDevices;
    if (staged()) {
      futDevices.push_back(device_);
    }
    auto w = c10::make_intrusive<MooncakeWork>(
        b_->getRank(), type_, name_, b_->getBackendName(), outputs, futDevices, b_->timeout_);
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

 private:
  at::Tensor stage(const at::Tensor& t, bool read, bool write) {
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

  c10::intrusive_ptr<c10d::Work> launchCpu(const c10::intrusive_ptr<MooncakeWork>& w) {
    std::string err;
    for (auto& fn : calls_) {
      uint64_t h = 0;
      int rc = fn(&h);
      if (rc != 0) {
        err = where() + ": " + lastError();
        break;
      }
      w->handles_.push_back(h);
    }
    if (!err.empty()) {
      w->submitError_ = err;
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

  c10::intrusive_ptr<c10d::Work> launchCuda(const c10::intrusive_ptr<MooncakeWork>& w) {
#ifdef MOONCAKE_WITH_CUDA
    std::shared_ptr<at::cuda::CUDAEvent> d2h;
    if (staged()) {
      w->cuda_ = true;
      w->lane_ = b_->lane(device_);
      c10::cuda::CUDAGuard guard(device_);
      auto cur = c10::cuda::getCurrentCUDAStream(device_.index());
      d2h = std::make_shared<at::cuda::CUDAEvent>();
      d2h->record(cur);
      w->h2d_ = std::move(h2d_);
      auto ev = std::make_shared<at::cuda::CUDAEvent>();
      w->doneEvent_ = ev;
      auto& lane = *w->lane_;
      std::lock_guard<std::mutex> g(b_->laneMu_);
      w->ticket_ = lane.nextTicket++;
      if (lane.useWaitValue) {
        // Gate the side stream on the completion counter, then enqueue the result copies.
        d2h->block(lane.stream);
        CUresult cr = waitValueFn()(
            lane.stream.stream(),
            reinterpret_cast<CUdeviceptr>(lane.counter.data_ptr()),
            w->ticket_,
            CU_STREAM_WAIT_VALUE_GEQ);
        TORCH_CHECK(
            cr == CUDA_SUCCESS, where(), ": cuStreamWaitValue32 failed with CUDA driver error ",
            static_cast<int>(cr), " (set MOONCAKE_PG_NO_STREAM_WAIT_VALUE=1 to avoid it)");
        c10::cuda::CUDAStreamGuard sg(lane.stream);
        for (auto& [dst, src] : w->h2d_) {
          if (dst.numel() > 0) {
            dst.copy_(src, /*non_blocking=*/true);
          }
          c10::cuda::CUDACachingAllocator::recordStream(dst.storage().data_ptr(), lane.stream);
        }
        ev->record(lane.stream);
        w->eventReady_ = true;
      }
    }
#endif
    auto calls = std::move(calls_);
    MooncakeBackend* b = b_;
    std::string where = this->where();
    {
      std::lock_guard<std::mutex> g(b->smu_);
#ifdef MOONCAKE_WITH_CUDA
      b->submits_.push_back([b, w, calls, where, d2h]() {
        if (d2h) {
          d2h->synchronize();
        }
#else
      b->submits_.push_back([b, w, calls, where]() {
#endif
        for (auto& fn : calls) {
          uint64_t h = 0;
          int rc = fn(&h);
          if (rc != 0) {
            w->submitError_ = where + ": " + lastError();
            break;
          }
          w->handles_.push_back(h);
        }
        b->enqueueCompletion(w);
      });
    }
    b->scv_.notify_one();
    return w;
  }

  MooncakeBackend* b_;
  bool sync_ = false;
  c10d::OpType type_;
  const char* name_;
  bool deviceSet_ = false;
  c10::Device device_{at::kCPU};
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> post_;
  std::vector<std::pair<at::Tensor, at::Tensor>> h2d_;
  std::vector<std::function<int(uint64_t*)>> calls_;
};

// ---------------------------------------------------------------- backend lifecycle

MooncakeBackend::MooncakeBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& groupName,
    const BackendOptions& options,
    bool cuda)
    : c10d::Backend(rank, size),
      cuda_(cuda),
      timeout_(timeout),
      groupName_(groupName),
      options_(options) {
  TORCH_CHECK(store, getBackendName(), ": a c10d store is required");
  TORCH_CHECK(
      size >= 1 && rank >= 0 && rank < std::max(size, options.maxGroupSize),
      getBackendName(), ": invalid rank ", rank, " for group size ", size);
  TORCH_CHECK(
      options.maxGroupSize <= 0 || options.maxGroupSize >= size,
      getBackendName(), ": max_group_size (", options.maxGroupSize,
      ") must be at least the group size (", size, ")");
  TORCH_CHECK(
      !(options.autoSyncOnFailure && !options.autoDeactivateOnFailure),
      getBackendName(),
      ": auto_sync_on_failure requires auto_deactivate_on_failure");
  bridge_ = std::make_unique<StoreBridge>(store);
  mc_pg_config cfg{};
  cfg.rank = rank;
  cfg.size = size;
  cfg.max_group_size = options.maxGroupSize > 0 ? options.maxGroupSize : 0;
  cfg.is_extension = options.isExtension ? 1 : 0;
  cfg.auto_deactivate_on_failure = options.autoDeactivateOnFailure ? 1 : 0;
  cfg.auto_sync_on_failure = options.autoSyncOnFailure ? 1 : 0;
  cfg.device_type = cuda ? 1 : 0;
  cfg.timeout_ms = timeout.count() > 0 ? timeout.count() : 0;
  cfg.group_name = groupName_.c_str();
  int rc = mc_pg_create(&cfg, &bridge_->ops, &pg_);
  TORCH_CHECK(
      rc == 0, getBackendName(), ": creating group '", groupName_, "' failed on rank ", rank,
      " of ", size, ": ", lastError());
  maxGroupSize_ = mc_pg_max_group_size(pg_);
  extentWord_ = mc_pg_extent_word(pg_);
  refreshSize();
  if (maxGroupSize_ <= 0) {
    maxGroupSize_ = std::max(size, options.maxGroupSize);
  }
  mc_pg_set_completion_hook(pg_, &MooncakeBackend::onWorkDone, this);
  if (!cuda_) {
    mc_pg_set_held_starts(pg_, 1);  // launchCpu starts each op or runs it inline
  }
  completion_ = std::thread([this] { completionLoop(); });
  if (cuda_) {
    submitter_ = std::thread([this] { submitLoop(); });
  }
}

MooncakeBackend::~MooncakeBackend() {
  try {
    shutdownGroup();
  } catch (const std::exception& e) {
    LOG(WARNING) << getBackendName() << ": shutdown failed: " << e.what();
  }
}

void MooncakeBackend::shutdownGroup() {
  if (closed_.exchange(true)) {
    return;
  }
  // Completion may run Python callbacks (Future.then); never join while holding the GIL.
  PyThreadState* saved = nullptr;
  if (Py_IsInitialized() && PyGILState_Check()) {
    saved = PyEval_SaveThread();
  }
  struct Restore {
    PyThreadState* s;
    ~Restore() {
      if (s) {
        PyEval_RestoreThread(s);
      }
    }
  } restore{saved};
  if (submitter_.joinable()) {
    {
      std::lock_guard<std::mutex> g(smu_);
      sstop_ = true;
    }
    scv_.notify_all();
    submitter_.join();
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (completion_.joinable()) {
    completion_.join();
  }
  if (pg_ != 0) {
    mc_pg_set_completion_hook(pg_, nullptr, nullptr);
    mc_pg_destroy(pg_);
    pg_ = 0;
  }
}

std::string MooncakeBackend::where(const char* op) const {
  std::ostringstream s;
  s << getBackendName() << " " << op << " (rank " << rank_ << " of " << size_ << ")";
  return s.str();
}

void MooncakeBackend::refreshSize() {
  if (extentWord_ != nullptr) {
    int32_t n = __atomic_load_n(extentWord_, __ATOMIC_ACQUIRE);
    if (n > 0) {
      size_ = n;
    }
  }
}

void MooncakeBackend::enqueueCompletion(const c10::intrusive_ptr<MooncakeWork>& w, bool notify) {
  {
    std::lock_guard<std::mutex> g(mu_);
    pending_.push_back(w);
    // A part that finished before the work was queued here signalled too early to be seen.
    if (notify || w->partsDone()) {
      signaled_ = true;
      notify = true;
    }
  }
  if (notify) {
    cv_.notify_one();
  }
}

void MooncakeBackend::forget(MooncakeWork* w) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    if (it->get() == w) {
      pending_.erase(std::next(it).base());
      return;
    }
  }
}

void MooncakeBackend::onWorkDone(void* self) {
  auto* b = static_cast<MooncakeBackend*>(self);
  {
    std::lock_guard<std::mutex> g(b->mu_);
    b->signaled_ = true;
  }
  b->cv_.notify_one();
}

void MooncakeBackend::submitLoop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(smu_);
      scv_.wait(lock, [&] { return sstop_ || !submits_.empty(); });
      if (submits_.empty()) {
        return;
      }
      job = std::move(submits_.front());
      submits_.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      LOG(ERROR) << getBackendName() << ": submission failed: " << e.what();
    }
  }
}

// Sleeps until a work finishes in libmooncake (the completion hook) or the group stops, then
// finishes, in submission order, every pending work whose parts are all done; when stopping,
// it waits for the rest. Works that their waiter finished (MooncakeWork::runHere) are skipped.
void MooncakeBackend::completionLoop() {
  std::vector<c10::intrusive_ptr<MooncakeWork>> ready;
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || signaled_; });
      signaled_ = false;
      stopping = stop_;
      if (stopping && pending_.empty()) {
        return;
      }
      for (auto it = pending_.begin(); it != pending_.end();) {
        if ((*it)->finishClaimed_.load()) {
          it = pending_.erase(it);
        } else if (stopping || (*it)->partsDone()) {
          ready.push_back(std::move(*it));
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& w : ready) {
      if (!w->finishClaimed_.exchange(true)) {
        finishWork(w);  // waits for its parts when stopping
      }
    }
    ready.clear();
  }
}

void MooncakeBackend::finishWork(const c10::intrusive_ptr<MooncakeWork>& w) {
  refreshSize();  // a failure during the op may have changed the membership
  std::string err = w->submitError_;
  bool localOk = err.empty();
  int source = -1;
  std::vector<int32_t> failed(std::max<int32_t>(maxGroupSize_, size_), 0);
  std::vector<int32_t> tmp(failed.size(), 0);
  // The group enforces its op timeout itself; this bound only guards against a stuck runtime.
  const auto limit = std::chrono::milliseconds(std::max<int64_t>(timeout_.count(), 1000)) * 2 +
      std::chrono::seconds(60);
  for (uint64_t h : w->handles_) {
    auto start = Clock::now();
    int rc;
    for (;;) {
      rc = mc_work_wait(h, 1000);
      if (rc != -2 || Clock::now() - start > limit) {
        break;
      }
    }
    if (rc != 0 && err.empty()) {
      if (rc == -2) {
        err = where(w->opName().c_str()) + ": timed out waiting for completion";
      } else {
        char buf[1024];
        int n = mc_work_error(h, buf, sizeof(buf));
        std::string msg = n > 0 ? std::string(buf) : lastError();
        err = where(w->opName().c_str()) + ": " + msg;
      }
    }
    if (rc != -2) {
      if (mc_work_is_success(h) != 1) {
        localOk = false;
      }
      int32_t s = mc_work_source(h);
      if (s >= 0) {
        source = s;
      }
      std::fill(tmp.begin(), tmp.end(), 0);
      if (mc_work_failed_ranks(h, tmp.data(), static_cast<int32_t>(tmp.size())) >= 0) {
        for (size_t i = 0; i < tmp.size(); ++i) {
          failed[i] |= tmp[i];
        }
      }
      mc_work_free(h);
    }
  }
  std::exception_ptr eptr;
  if (!err.empty()) {
    eptr = std::make_exception_ptr(c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, err));
  } else {
    try {
      for (auto& fn : w->post_) {
        fn();
      }
    } catch (...) {
      eptr = std::current_exception();
    }
  }
#ifdef MOONCAKE_WITH_CUDA
  if (w->cuda_) {
    try {
      auto& lane = *w->lane_;
      c10::cuda::CUDAGuard guard(lane.device);
      auto* ev = static_cast<at::cuda::CUDAEvent*>(w->doneEvent_.get());
      if (lane.useWaitValue) {
        lane.release(w->ticket_);
      } else {
        c10::cuda::CUDAStreamGuard sg(lane.stream);
        if (!eptr) {
          for (auto& [dst, src] : w->h2d_) {
            if (dst.numel() > 0) {
              dst.copy_(src, /*non_blocking=*/true);
            }
            c10::cuda::CUDACachingAllocator::recordStream(dst.storage().data_ptr(), lane.stream);
          }
        }
        ev->record(lane.stream);
        {
          std::lock_guard<std::mutex> g(w->mutex_);
          w->eventReady_ = true;
        }
        w->cv_.notify_all();
      }
      ev->synchronize();
    } catch (...) {
      if (!eptr) {
        eptr = std::current_exception();
      }
    }
  }
#endif
  // Tensors (and closures holding them) are released outside the work's lock: dropping the
  // last reference to a tensor that has a Python object takes the GIL, and a Python thread that
  // holds the GIL may be waiting for this lock (get_failed_ranks_hint, is_completed): holding
  // it here deadlocked the two.
  std::vector<std::pair<at::Tensor, at::Tensor>> h2d;
  std::vector<std::function<void()>> post;
  {
    std::lock_guard<std::mutex> g(w->mutex_);
    w->source_ = source;
    w->failed_ = std::move(failed);
    w->localSuccess_ = localOk && !eptr;
    h2d.swap(w->h2d_);
    post.swap(w->post_);
  }
  h2d.clear();
  post.clear();
  try {
#ifdef MOONCAKE_WITH_CUDA
    if (w->cuda_) {
      c10::cuda::CUDAStreamGuard sg(w->lane_->stream);
      w->complete(eptr);
    } else {
      w->complete(eptr);
    }
#else
    w->complete(eptr);
#endif
  } catch (const std::exception& e) {
    LOG(ERROR) << getBackendName() << ": completing " << w->opName() << " failed: " << e.what();
  }
  // The buffers may go now: the runtime no longer touches them (released outside the lock,
  // see above).
  std::vector<at::Tensor> keep;
  {
    std::lock_guard<std::mutex> g(w->mutex_);
    keep.swap(w->keep_);
  }
  keep.clear();
}

// ---------------------------------------------------------------- helpers for ops

namespace {

struct ReduceArgs {
  int32_t dtype;
  int32_t op;
  int64_t count;  // elements of the (possibly real-viewed) dtype
};

ReduceArgs reduceArgs(
    const std::string& where,
    const at::Tensor& t,
    const c10d::ReduceOp& rop) {
  int32_t op = static_cast<int32_t>(rop.op_);
  TORCH_CHECK(
      rop.op_ != c10d::ReduceOp::PREMUL_SUM && rop.op_ <= c10d::ReduceOp::BXOR, where,
      ": reduce op ", static_cast<int>(rop.op_), " is not supported (SUM, AVG, PRODUCT, MIN, "
      "MAX, BAND, BOR, BXOR are)");
  at::ScalarType st = t.scalar_type();
  int64_t count = t.numel();
  if (at::isComplexType(st)) {
    TORCH_CHECK(
        rop.op_ == c10d::ReduceOp::SUM || rop.op_ == c10d::ReduceOp::AVG, where,
        ": complex tensors support only SUM and AVG");
    st = c10::toRealValueType(st);
    count *= 2;
  }
  TORCH_CHECK(
      reducibleDtype(st), where, ": dtype ", t.scalar_type(), " is not supported for reductions");
  bool isInt = at::isIntegralType(st, /*includeBool=*/true);
  TORCH_CHECK(
      isInt ||
          !(rop.op_ == c10d::ReduceOp::BAND || rop.op_ == c10d::ReduceOp::BOR ||
            rop.op_ == c10d::ReduceOp::BXOR),
      where, ": bitwise reductions need an integer or bool dtype, got ", t.scalar_type());
  return {static_cast<int32_t>(st), op, count};
}

void checkSingle(const std::string& where, const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(
      ts.size() == 1, where, ": expects exactly one ", what, " tensor, got ", ts.size());
}

void checkSameType(
    const std::string& where,
    const at::Tensor& a,
    const at::Tensor& b,
    const char* aName,
    const char* bName) {
  TORCH_CHECK(
      a.scalar_type() == b.scalar_type(), where, ": dtype mismatch between ", aName, " (",
      a.scalar_type(), ") and ", bName, " (", b.scalar_type(), ")");
}

void checkRank(const std::string& where, int64_t r, int size, const char* what) {
  TORCH_CHECK(
      r >= 0 && r < size, where, ": invalid ", what, " rank ", r, " (group size ", size, ")");
}

} // namespace

// ---------------------------------------------------------------- ops

c10::intrusive_ptr<c10d::Work> MooncakeBackend::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  Op op(this, c10d::OpType::BROADCAST);
  op.setSync(isSync(opts));
  checkSingle(op.where(), tensors, "input");
  op.check(tensors[0], "tensor");
  TORCH_CHECK(opts.rootTensor == 0, op.where(), ": rootTensor must be 0");
  checkRank(op.where(), opts.rootRank, size_, "root");
  at::Tensor buf = op.inout(tensors[0]);
  void* p = ptrOf(buf);
  int64_t n = nbytesOf(buf);
  int32_t root = static_cast<int32_t>(opts.rootRank);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_broadcast(pg, p, n, root, h); });
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  Op op(this, c10d::OpType::ALLREDUCE);
  op.setSync(isSync(opts));
  checkSingle(op.where(), tensors, "input");
  op.check(tensors[0], "tensor");
  ReduceArgs ra = reduceArgs(op.where(), tensors[0], opts.reduceOp);
  at::Tensor buf = op.inout(tensors[0]);
  void* p = ptrOf(buf);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_allreduce(pg, p, ra.count, ra.dtype, ra.op, h); });
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  Op op(this, c10d::OpType::ALLREDUCE_COALESCED);
  op.setSync(isSync(opts));
  TORCH_CHECK(!tensors.empty(), op.where(), ": expects at least one tensor");
  uint64_t pg = pg_;
  std::vector<ReduceArgs> args;
  for (size_t i = 0; i < tensors.size(); ++i) {
    op.check(tensors[i], "tensor");
    args.push_back(reduceArgs(op.where(), tensors[i], opts.reduceOp));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor buf = op.inout(tensors[i]);
    void* p = ptrOf(buf);
    ReduceArgs ra = args[i];
    op.call([=](uint64_t* h) { return mc_pg_allreduce(pg, p, ra.count, ra.dtype, ra.op, h); });
  }
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  Op op(this, c10d::OpType::REDUCE);
  op.setSync(isSync(opts));
  checkSingle(op.where(), tensors, "input");
  op.check(tensors[0], "tensor");
  TORCH_CHECK(opts.rootTensor == 0, op.where(), ": rootTensor must be 0");
  checkRank(op.where(), opts.rootRank, size_, "root");
  ReduceArgs ra = reduceArgs(op.where(), tensors[0], opts.reduceOp);
  at::Tensor buf = op.inout(tensors[0]);
  void* p = ptrOf(buf);
  int32_t root = static_cast<int32_t>(opts.rootRank);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_reduce(pg, p, ra.count, ra.dtype, ra.op, root, h);
  });
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::ALLGATHER);
  op.setSync(isSync(opts));
  checkSingle(op.where(), inputTensors, "input");
  TORCH_CHECK(
      outputTensors.size() == 1, op.where(), ": expects one output tensor list, got ",
      outputTensors.size());
  auto& in = inputTensors[0];
  auto& outs = outputTensors[0];
  op.check(in, "input");
  TORCH_CHECK(
      static_cast<int>(outs.size()) == size_, op.where(), ": output tensor list has ",
      outs.size(), " tensors, expected the group size ", size_);
  for (auto& o : outs) {
    op.check(o, "output");
    checkSameType(op.where(), o, in, "output", "input");
    TORCH_CHECK(
        o.numel() == in.numel(), op.where(), ": output tensor has ", o.numel(),
        " elements, input has ", in.numel());
  }
  at::Tensor sin = op.in(in);
  auto ptrs = std::make_shared<std::vector<void*>>();
  for (auto& o : outs) {
    ptrs->push_back(ptrOf(op.out(o)));
  }
  const void* ip = ptrOf(sin);
  int64_t n = nbytesOf(sin);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_allgather(pg, ip, n, ptrs->data(), h); });
  return op.launch(outs);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::_ALLGATHER_BASE);
  op.setSync(isSync(opts));
  op.check(inputBuffer, "input");
  op.check(outputBuffer, "output");
  checkSameType(op.where(), outputBuffer, inputBuffer, "output", "input");
  TORCH_CHECK(
      outputBuffer.numel() == inputBuffer.numel() * size_, op.where(),
      ": output tensor must have group size (", size_, ") x input elements (",
      inputBuffer.numel(), "), got ", outputBuffer.numel());
  at::Tensor sin = op.in(inputBuffer);
  at::Tensor sout = op.out(outputBuffer);
  int64_t n = nbytesOf(sin);
  auto ptrs = std::make_shared<std::vector<void*>>();
  for (int r = 0; r < size_; ++r) {
    ptrs->push_back(n == 0 ? ptrOf(sout) : static_cast<uint8_t*>(sout.data_ptr()) + r * n);
  }
  const void* ip = ptrOf(sin);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_allgather(pg, ip, n, ptrs->data(), h); });
  return op.launch({outputBuffer});
}

// outputTensorLists[r][i] receives inputTensors[i] of rank r (gloo's layout).
c10::intrusive_ptr<c10d::Work> MooncakeBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::ALLGATHER_COALESCED);
  op.setSync(isSync(opts));
  TORCH_CHECK(
      static_cast<int>(outputTensorLists.size()) == size_, op.where(), ": got ",
      outputTensorLists.size(), " output lists, expected the group size ", size_);
  std::vector<at::Tensor> flat;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(
        outputTensorLists[r].size() == inputTensors.size(), op.where(), ": output list ", r,
        " has ", outputTensorLists[r].size(), " tensors, expected one per input (",
        inputTensors.size(), ")");
    for (size_t i = 0; i < inputTensors.size(); ++i) {
      auto& o = outputTensorLists[r][i];
      op.check(o, "output");
      checkSameType(op.where(), o, inputTensors[i], "output", "input");
      TORCH_CHECK(
          o.numel() == inputTensors[i].numel(), op.where(), ": output tensor [", r, "][", i,
          "] has ", o.numel(), " elements, input ", i, " has ", inputTensors[i].numel());
      flat.push_back(o);
    }
  }
  for (auto& in : inputTensors) {
    op.check(in, "input");
  }
  uint64_t pg = pg_;
  for (size_t i = 0; i < inputTensors.size(); ++i) {
    at::Tensor sin = op.in(inputTensors[i]);
    auto ptrs = std::make_shared<std::vector<void*>>();
    for (int r = 0; r < size_; ++r) {
      ptrs->push_back(ptrOf(op.out(outputTensorLists[r][i])));
    }
    const void* ip = ptrOf(sin);
    int64_t n = nbytesOf(sin);
    op.call([=](uint64_t* h) { return mc_pg_allgather(pg, ip, n, ptrs->data(), h); });
  }
  return op.launch(flat);
}

#if MOONCAKE_TORCH_AT_LEAST(2, 1)
c10::intrusive_ptr<c10d::Work> MooncakeBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED);
  op.setSync(isSync(opts));
  TORCH_CHECK(
      outputs.size() == inputs.size(), op.where(), ": got ", outputs.size(), " outputs for ",
      inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    op.check(inputs[i], "input");
    op.check(outputs[i], "output");
    checkSameType(op.where(), outputs[i], inputs[i], "output", "input");
    TORCH_CHECK(
        outputs[i].numel() == inputs[i].numel() * size_, op.where(), ": output ", i,
        " must have group size (", size_, ") x input elements (", inputs[i].numel(), "), got ",
        outputs[i].numel());
  }
  uint64_t pg = pg_;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor sin = op.in(inputs[i]);
    at::Tensor sout = op.out(outputs[i]);
    int64_t n = nbytesOf(sin);
    auto ptrs = std::make_shared<std::vector<void*>>();
    for (int r = 0; r < size_; ++r) {
      ptrs->push_back(n == 0 ? ptrOf(sout) : static_cast<uint8_t*>(sout.data_ptr()) + r * n);
    }
    const void* ip = ptrOf(sin);
    op.call([=](uint64_t* h) { return mc_pg_allgather(pg, ip, n, ptrs->data(), h); });
  }
  return op.launch(outputs);
}
#endif

c10::intrusive_ptr<c10d::Work> MooncakeBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  Op op(this, c10d::OpType::GATHER);
  op.setSync(isSync(opts));
  checkSingle(op.where(), inputTensors, "input");
  checkRank(op.where(), opts.rootRank, size_, "root");
  auto& in = inputTensors[0];
  op.check(in, "input");
  const bool isRoot = rank_ == opts.rootRank;
  std::vector<at::Tensor> outs;
  if (isRoot) {
    TORCH_CHECK(
        outputTensors.size() == 1, op.where(), ": root expects one output tensor list, got ",
        outputTensors.size());
    outs = outputTensors[0];
    TORCH_CHECK(
        static_cast<int>(outs.size()) == size_, op.where(), ": output tensor list has ",
        outs.size(), " tensors, expected the group size ", size_);
    for (auto& o : outs) {
      op.check(o, "output");
      checkSameType(op.where(), o, in, "output", "input");
      TORCH_CHECK(
          o.numel() == in.numel(), op.where(), ": output tensor has ", o.numel(),
          " elements, input has ", in.numel());
    }
  } else {
    TORCH_CHECK(
        outputTensors.empty() || (outputTensors.size() == 1 && outputTensors[0].empty()),
        op.where(), ": non-root ranks must pass an empty output list");
  }
  at::Tensor sin = op.in(in);
  auto ptrs = std::make_shared<std::vector<void*>>();
  for (auto& o : outs) {
    ptrs->push_back(ptrOf(op.out(o)));
  }
  const void* ip = ptrOf(sin);
  int64_t n = nbytesOf(sin);
  int32_t root = static_cast<int32_t>(opts.rootRank);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_gather(pg, ip, n, ptrs->empty() ? nullptr : ptrs->data(), root, h);
  });
  return op.launch(outs);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  Op op(this, c10d::OpType::SCATTER);
  op.setSync(isSync(opts));
  checkSingle(op.where(), outputTensors, "output");
  checkRank(op.where(), opts.rootRank, size_, "root");
  auto& out = outputTensors[0];
  op.check(out, "output");
  const bool isRoot = rank_ == opts.rootRank;
  std::vector<at::Tensor> ins;
  if (isRoot) {
    TORCH_CHECK(
        inputTensors.size() == 1, op.where(), ": root expects one input tensor list, got ",
        inputTensors.size());
    ins = inputTensors[0];
    TORCH_CHECK(
        static_cast<int>(ins.size()) == size_, op.where(), ": input tensor list has ",
        ins.size(), " tensors, expected the group size ", size_);
    for (auto& i : ins) {
      op.check(i, "input");
      checkSameType(op.where(), out, i, "output", "input");
      TORCH_CHECK(
          i.numel() == out.numel(), op.where(), ": input tensor has ", i.numel(),
          " elements, output has ", out.numel());
    }
  } else {
    TORCH_CHECK(
        inputTensors.empty() || (inputTensors.size() == 1 && inputTensors[0].empty()),
        op.where(), ": non-root ranks must pass an empty input list");
  }
  auto ptrs = std::make_shared<std::vector<const void*>>();
  for (auto& i : ins) {
    ptrs->push_back(ptrOf(op.in(i)));
  }
  at::Tensor sout = op.out(out);
  void* op_ = ptrOf(sout);
  int64_t n = nbytesOf(sout);
  int32_t root = static_cast<int32_t>(opts.rootRank);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_scatter(pg, ptrs->empty() ? nullptr : ptrs->data(), op_, n, root, h);
  });
  return op.launch(outputTensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  Op op(this, c10d::OpType::REDUCE_SCATTER);
  op.setSync(isSync(opts));
  checkSingle(op.where(), outputTensors, "output");
  TORCH_CHECK(
      inputTensors.size() == 1, op.where(), ": expects one input tensor list, got ",
      inputTensors.size());
  auto& out = outputTensors[0];
  auto& ins = inputTensors[0];
  op.check(out, "output");
  TORCH_CHECK(
      static_cast<int>(ins.size()) == size_, op.where(), ": input tensor list has ", ins.size(),
      " tensors, expected the group size ", size_);
  for (auto& i : ins) {
    op.check(i, "input");
    checkSameType(op.where(), out, i, "output", "input");
    TORCH_CHECK(
        i.numel() == out.numel(), op.where(), ": input tensor has ", i.numel(),
        " elements, output has ", out.numel());
  }
  ReduceArgs ra = reduceArgs(op.where(), out, opts.reduceOp);
  auto ptrs = std::make_shared<std::vector<const void*>>();
  for (auto& i : ins) {
    ptrs->push_back(ptrOf(op.in(i)));
  }
  void* o = ptrOf(op.out(out));
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_reduce_scatter(pg, ptrs->data(), o, ra.count, ra.dtype, ra.op, h);
  });
  return op.launch(outputTensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  Op op(this, c10d::OpType::_REDUCE_SCATTER_BASE);
  op.setSync(isSync(opts));
  op.check(inputBuffer, "input");
  op.check(outputBuffer, "output");
  checkSameType(op.where(), outputBuffer, inputBuffer, "output", "input");
  TORCH_CHECK(
      inputBuffer.numel() == outputBuffer.numel() * size_, op.where(),
      ": input tensor must have group size (", size_, ") x output elements (",
      outputBuffer.numel(), "), got ", inputBuffer.numel());
  ReduceArgs ra = reduceArgs(op.where(), outputBuffer, opts.reduceOp);
  at::Tensor sin = op.in(inputBuffer);
  at::Tensor sout = op.out(outputBuffer);
  int64_t n = nbytesOf(sout);
  auto ptrs = std::make_shared<std::vector<const void*>>();
  for (int r = 0; r < size_; ++r) {
    ptrs->push_back(n == 0 ? ptrOf(sin) : static_cast<const uint8_t*>(sin.data_ptr()) + r * n);
  }
  void* o = ptrOf(sout);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_reduce_scatter(pg, ptrs->data(), o, ra.count, ra.dtype, ra.op, h);
  });
  return op.launch({outputBuffer});
}

#if MOONCAKE_TORCH_AT_LEAST(2, 1)
c10::intrusive_ptr<c10d::Work> MooncakeBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Op op(this, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED);
  op.setSync(isSync(opts));
  TORCH_CHECK(
      outputs.size() == inputs.size(), op.where(), ": got ", outputs.size(), " outputs for ",
      inputs.size(), " inputs");
  std::vector<ReduceArgs> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    op.check(inputs[i], "input");
    op.check(outputs[i], "output");
    checkSameType(op.where(), outputs[i], inputs[i], "output", "input");
    TORCH_CHECK(
        inputs[i].numel() == outputs[i].numel() * size_, op.where(), ": input ", i,
        " must have group size (", size_, ") x output elements (", outputs[i].numel(),
        "), got ", inputs[i].numel());
    args.push_back(reduceArgs(op.where(), outputs[i], opts.reduceOp));
  }
  uint64_t pg = pg_;
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor sin = op.in(inputs[i]);
    at::Tensor sout = op.out(outputs[i]);
    int64_t n = nbytesOf(sout);
    auto ptrs = std::make_shared<std::vector<const void*>>();
    for (int r = 0; r < size_; ++r) {
      ptrs->push_back(
          n == 0 ? ptrOf(sin) : static_cast<const uint8_t*>(sin.data_ptr()) + r * n);
    }
    void* o = ptrOf(sout);
    ReduceArgs ra = args[i];
    op.call([=](uint64_t* h) {
      return mc_pg_reduce_scatter(pg, ptrs->data(), o, ra.count, ra.dtype, ra.op, h);
    });
  }
  return op.launch(outputs);
}
#endif

c10::intrusive_ptr<c10d::Work> MooncakeBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  Op op(this, c10d::OpType::ALLTOALL_BASE);
  op.setSync(isSync(opts));
  op.check(inputBuffer, "input");
  op.check(outputBuffer, "output");
  checkSameType(op.where(), outputBuffer, inputBuffer, "output", "input");
  // Splits are in rows of dim 0; an empty split list means equal splits.
  auto splits = [&](const at::Tensor& t, const std::vector<int64_t>& s, const char* what) {
    std::vector<int64_t> bytes(size_);
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t rowBytes = rows == 0 ? 0 : nbytesOf(t) / rows;
    if (s.empty()) {
      TORCH_CHECK(
          rows % size_ == 0, op.where(), ": ", what, " dim 0 (", rows,
          ") is not divisible by the group size ", size_);
      std::fill(bytes.begin(), bytes.end(), rows / size_ * rowBytes);
    } else {
      TORCH_CHECK(
          static_cast<int>(s.size()) == size_, op.where(), ": ", what, " split sizes have ",
          s.size(), " entries, expected the group size ", size_);
      int64_t sum = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        TORCH_CHECK(s[i] >= 0, op.where(), ": negative ", what, " split size ", s[i]);
        sum += s[i];
        bytes[i] = s[i] * rowBytes;
      }
      TORCH_CHECK(
          sum == rows, op.where(), ": ", what, " split sizes sum to ", sum, " but dim 0 is ",
          rows);
    }
    return bytes;
  };
  auto inBytes = std::make_shared<std::vector<int64_t>>(splits(inputBuffer, inputSplitSizes, "input"));
  auto outBytes =
      std::make_shared<std::vector<int64_t>>(splits(outputBuffer, outputSplitSizes, "output"));
  at::Tensor sin = op.in(inputBuffer);
  at::Tensor sout = op.out(outputBuffer);
  auto ins = std::make_shared<std::vector<const void*>>();
  auto outs = std::make_shared<std::vector<void*>>();
  int64_t io = 0, oo = 0;
  for (int r = 0; r < size_; ++r) {
    ins->push_back(
        sin.numel() == 0 ? ptrOf(sin) : static_cast<const uint8_t*>(sin.data_ptr()) + io);
    outs->push_back(sout.numel() == 0 ? ptrOf(sout) : static_cast<uint8_t*>(sout.data_ptr()) + oo);
    io += (*inBytes)[r];
    oo += (*outBytes)[r];
  }
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_alltoall(pg, ins->data(), inBytes->data(), outs->data(), outBytes->data(), h);
  });
  return op.launch({outputBuffer});
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  Op op(this, c10d::OpType::ALLTOALL);
  op.setSync(isSync(opts));
  TORCH_CHECK(
      static_cast<int>(inputTensors.size()) == size_, op.where(), ": input tensor list has ",
      inputTensors.size(), " tensors, expected the group size ", size_);
  TORCH_CHECK(
      static_cast<int>(outputTensors.size()) == size_, op.where(), ": output tensor list has ",
      outputTensors.size(), " tensors, expected the group size ", size_);
  for (int r = 0; r < size_; ++r) {
    op.check(inputTensors[r], "input");
    op.check(outputTensors[r], "output");
    checkSameType(op.where(), outputTensors[r], inputTensors[0], "output", "input");
    checkSameType(op.where(), inputTensors[r], inputTensors[0], "input", "input");
  }
  auto ins = std::make_shared<std::vector<const void*>>();
  auto outs = std::make_shared<std::vector<void*>>();
  auto inBytes = std::make_shared<std::vector<int64_t>>();
  auto outBytes = std::make_shared<std::vector<int64_t>>();
  for (int r = 0; r < size_; ++r) {
    at::Tensor si = op.in(inputTensors[r]);
    at::Tensor so = op.out(outputTensors[r]);
    ins->push_back(ptrOf(si));
    inBytes->push_back(nbytesOf(si));
    outs->push_back(ptrOf(so));
    outBytes->push_back(nbytesOf(so));
  }
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) {
    return mc_pg_alltoall(pg, ins->data(), inBytes->data(), outs->data(), outBytes->data(), h);
  });
  return op.launch(outputTensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  Op op(this, c10d::OpType::SEND);
  checkSingle(op.where(), tensors, "input");
  op.check(tensors[0], "tensor");
  checkRank(op.where(), dstRank, std::max(size_, maxGroupSize_), "destination");
  TORCH_CHECK(dstRank != rank_, op.where(), ": a rank cannot send to itself");
  at::Tensor s = op.in(tensors[0]);
  const void* p = ptrOf(s);
  int64_t n = nbytesOf(s);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_send(pg, p, n, dstRank, tag, h); });
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  Op op(this, c10d::OpType::RECV);
  checkSingle(op.where(), tensors, "output");
  op.check(tensors[0], "tensor");
  checkRank(op.where(), srcRank, std::max(size_, maxGroupSize_), "source");
  TORCH_CHECK(srcRank != rank_, op.where(), ": a rank cannot receive from itself");
  at::Tensor s = op.out(tensors[0]);
  void* p = ptrOf(s);
  int64_t n = nbytesOf(s);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_recv(pg, p, n, srcRank, tag, h); });
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  Op op(this, c10d::OpType::RECVANYSOURCE);
  checkSingle(op.where(), tensors, "output");
  op.check(tensors[0], "tensor");
  at::Tensor s = op.out(tensors[0]);
  void* p = ptrOf(s);
  int64_t n = nbytesOf(s);
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_recv(pg, p, n, -1, tag, h); });
  return op.launch(tensors);
}

c10::intrusive_ptr<c10d::Work> MooncakeBackend::barrier(const c10d::BarrierOptions& opts) {
  Op op(this, c10d::OpType::BARRIER);
  op.setSync(isSync(opts));
  uint64_t pg = pg_;
  op.call([=](uint64_t* h) { return mc_pg_barrier(pg, h); });
  return op.launch({});
}

// ---------------------------------------------------------------- elastic

std::vector<int32_t> MooncakeBackend::activeRanks() {
  TORCH_CHECK(!closed_.load(), getBackendName(), ": the process group was destroyed");
  std::vector<int32_t> out(maxGroupSize_, 0);
  int rc = mc_pg_get_active_ranks(pg_, out.data(), static_cast<int32_t>(out.size()));
  TORCH_CHECK(rc >= 0, getBackendName(), ": get_active_ranks failed: ", lastError());
  return out;
}

int32_t MooncakeBackend::maxGroupSize() {
  return maxGroupSize_;
}

int64_t MooncakeBackend::currentEpoch() {
  TORCH_CHECK(!closed_.load(), getBackendName(), ": the process group was destroyed");
  int64_t e = mc_pg_current_epoch(pg_);
  TORCH_CHECK(e >= 0, getBackendName(), ": get_current_epoch failed: ", lastError());
  return e;
}

} // namespace mooncake
