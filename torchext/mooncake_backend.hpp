// The torch.distributed shim over libmooncake.so's process-group C ABI (capi/include/mooncake_pg.h).
//
// MooncakeBackend is a c10d::Backend whose every op validates its arguments on the calling thread
// (TORCH_CHECK -> RuntimeError naming the backend, the op, the rank and the problem), turns its
// tensors into contiguous host buffers (staging copies where the tensor is non-contiguous or lives
// on a CUDA device) and enqueues one or more mc_pg_* ops. A per-backend completion thread waits
// on the outstanding works in submission order, copies staged results back and completes the
// MooncakeWork (and its Future) with the output tensors or the error.
//
// CUDA tensors (backend "mooncake"): inputs are copied device->host into pinned memory on the
// current stream; a submit thread waits for that copy and hands the host buffers to the group.
// The host->device copies of the results are enqueued at once on a side stream behind a
// cuStreamWaitValue32 on a host-mapped counter that the completion thread bumps when the op is
// done, so Work::wait() only makes the caller's current stream wait on an event and never blocks
// the host. Where stream memory operations are unavailable the completion thread issues the
// copies itself and wait() blocks until they are enqueued.
//
// Files, one job each:
//   mooncake_backend.{hpp,cpp}  this class: construction, shutdown, elastic queries
//   store_bridge.cpp            the c10d store as mc_store_ops callbacks for the Go side
//   work.{hpp,cpp}              MooncakeWork (wait, completion, Future)
//   op.{hpp,cpp}                MooncakeBackend::Op: argument checks, staging, mc_pg_* calls
//   threads.cpp                 the completion and submit threads; finishing a work
//   cuda.cpp                    a work's CUDA side: stream ordering, result copies, events
//   ipc.hpp, ipc_path.cpp       the same-host device path (CUDA IPC; ipc_cuda.cpp, ipc_fake.cpp)
//   collectives.cpp, p2p.cpp    the c10d::Backend op overrides
//   util.hpp                    buffer pointers, last error, env switches, the CUDA lane
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "compat.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ipc.hpp"
#include "mooncake_pg.h"
#include "work.hpp"

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#if defined(TORCH_VERSION_MAJOR) && defined(TORCH_VERSION_MINOR)
#define MOONCAKE_TORCH_AT_LEAST(ma, mi) \
  (TORCH_VERSION_MAJOR > (ma) || (TORCH_VERSION_MAJOR == (ma) && TORCH_VERSION_MINOR >= (mi)))
#else
#define MOONCAKE_TORCH_AT_LEAST(ma, mi) 1
#endif

namespace mooncake {

// What the creator passes besides the store, rank and size; the zero value is the default.
struct BackendOptions {
  std::chrono::milliseconds timeout{0};  // op timeout; 0: libmooncake's default
  std::string groupName;
  bool cuda = false;  // backend "mooncake" (CUDA or CPU tensors), else "mooncake-cpu"
  int maxGroupSize = 0;
  bool isExtension = false;
  bool autoDeactivateOnFailure = true;
  bool autoSyncOnFailure = true;
};

// Keeps the c10d store alive for the Go side and adapts it to mc_store_ops.
struct StoreBridge {
  c10::intrusive_ptr<c10d::Store> store;
  mc_store_ops ops{};
  explicit StoreBridge(c10::intrusive_ptr<c10d::Store> s);
};

class MooncakeBackend : public c10d::Backend {
 public:
  MooncakeBackend(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const BackendOptions& options);
  ~MooncakeBackend() override;

  const std::string getBackendName() const override {
    return cuda_ ? "mooncake" : "mooncake-cpu";
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts =
          c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
#if MOONCAKE_TORCH_AT_LEAST(2, 1)  // virtual since torch 2.1
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
#endif
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
#if MOONCAKE_TORCH_AT_LEAST(2, 1)  // virtual since torch 2.1
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
#endif
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors,
      int dstRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors,
      int srcRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // Elastic membership.
  std::vector<int32_t> activeRanks();
  int32_t maxGroupSize();
  int currentSize() const { return curSize_; }  // after refreshSize()
  // Active ranks in this rank's current view: lists and whole-group tensors may be sized by
  // them after a failure (upstream's layout).
  int activeCount();
  int64_t currentEpoch();
  uint64_t handle() const { return pg_; }
  // Sets the size torch reports (ProcessGroup::getSize -> Backend::getSize) to the group's
  // world size (highest active rank + 1), which elastic membership changes.
  void refreshSize();

  // The same-host device path's counters: ops run on it, scratch buffers exported, peer buffers
  // mapped (cache misses), per memory kind ("cuda-ipc", "shm-fake").
  std::map<std::string, int64_t> ipcStats();

  // Waits for every outstanding work and frees the group (idempotent; the destructor calls it).
  void shutdownGroup();
  // c10d::Backend::shutdown exists in newer torch only: declared without `override` so the
  // shim compiles against older headers too (where it is simply a new virtual).
  void shutdown() { shutdownGroup(); }

 private:
  friend class MooncakeWork;
  class Op;  // builds one work: staging, pointers, submission
  friend class Op;
  friend class IpcPath;

  // Runs one control op of the same-host device path (an all-gather or barrier through the
  // group) on the calling thread; raises on an error or a failed peer.
  void control(const char* what, const std::function<int(uint64_t*)>& fn);

  // notify=false: the work's parts wake the completion thread when they finish (the
  // completion hook), so a work that its waiter runs and finishes wakes nobody.
  void enqueueCompletion(const c10::intrusive_ptr<MooncakeWork>& w, bool notify = true);
  void forget(MooncakeWork* w);  // drops a work its waiter finished from pending_
  static void onWorkDone(void* self);  // mc_pg_set_completion_hook callback
  void completionLoop();
  void finishWork(const c10::intrusive_ptr<MooncakeWork>& w);
  void submitLoop();
  std::string where(const char* op) const;

  bool cuda_;
  std::chrono::milliseconds timeout_;
  std::string groupName_;
  BackendOptions options_;
  int32_t maxGroupSize_ = 0;
  int curSize_ = 0;  // the group's current size (Backend::size_ may be const: see compat.hpp)
  std::unique_ptr<StoreBridge> bridge_;
  uint64_t pg_ = 0;
  void* seam_ = nullptr;  // libmooncake_pg.so's transfer seam, only under a fault injector
  const int32_t* worldSizeWord_ = nullptr;  // written by libmooncake (mc_pg_world_size_word)
  std::atomic<bool> closed_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<MooncakeWork>> pending_;
  bool signaled_ = false;  // a work finished since the completion thread last looked
  bool stop_ = false;
  std::thread completion_;

  // CUDA: submissions run on this thread once their device->host copies are done.
  std::mutex smu_;
  std::condition_variable scv_;
  std::deque<std::function<void()>> submits_;
  bool sstop_ = false;
  std::thread submitter_;
  std::mutex laneMu_;
  std::map<int, std::shared_ptr<CudaLane>> lanes_;
  std::shared_ptr<CudaLane> lane(const c10::Device& d);
  std::unique_ptr<IpcPath> ipc_ = std::make_unique<IpcPath>();
};

// True when the extension was built with CUDA staging support.
bool builtWithCuda();

} // namespace mooncake
