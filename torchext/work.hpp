// MooncakeWork: the c10d::Work a MooncakeBackend op returns. It holds the op's libmooncake work
// handles, everything the Go side reads or writes, and the copy-backs to run on success; the
// backend's completion thread (or a thread that waits on it, see runHere) finishes it.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mooncake {

struct CudaLane;  // per-device side stream + completion counter (util.hpp)
class MooncakeBackend;

class MooncakeWork : public c10d::Work {
 public:
  // rank, backend name and timeout come from b.
  MooncakeWork(const MooncakeBackend& b, c10d::OpType type, std::string opName,
               std::vector<at::Tensor> outputs, std::vector<c10::Device> futureDevices);
  ~MooncakeWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Overrides Work::getTimeout() where torch has it (not `override`: torch 2.11 lacks it).
  std::chrono::milliseconds getTimeout() const;

  // Elastic information, valid once completed.
  std::vector<int32_t> failedRanks() const;
  bool localSuccess() const;
  const std::string& opName() const { return opName_; }

 private:
  friend class MooncakeBackend;
  friend class IpcPath;  // the same-host device path adds its rerun's handle (ipc.hpp)
  void complete(std::exception_ptr eptr);
  void runHere();
  bool finishHere();  // runs the unstarted parts here; true when this call finished the work
  bool partsDone() const;  // every submitted part finished in libmooncake

  // CUDA (cuda.cpp). At submission: orders the work's result copies h2d after its op on the
  // device's lane; returns what waits for the inputs' device->host copies.
  std::function<void()> stageCuda(
      MooncakeBackend& b, const c10::Device& device,
      std::vector<std::pair<at::Tensor, at::Tensor>> h2d);
  // Once the op finished: releases (or issues) the result copies and waits for them; a CUDA
  // error becomes eptr where the op had none.
  void finishCuda(std::exception_ptr& eptr);

  // CPU works: the backend whose completion thread would finish this work. A thread that
  // waits on the work runs its ops itself when they have not started (mc_work_run) and then
  // finishes it, instead of two hand-offs (to the op queue's thread and back through the
  // completion thread); finishClaimed_ makes sure only one of them finishes it.
  MooncakeBackend* backend_ = nullptr;
  std::atomic<bool> finishClaimed_{false};

  std::string opName_;
  std::string backendName_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::chrono::milliseconds timeout_;

  // Filled at submission (caller thread / submit thread), consumed by the completion thread.
  std::vector<uint64_t> handles_;
  std::vector<at::Tensor> keep_;            // everything the Go side reads or writes
  std::vector<std::function<void()>> post_; // run on success, before completion (copy-backs)
  std::string submitError_;                 // an op of a multi-op work failed to enqueue
  std::vector<int32_t> priorFailed_;        // ranks that failed before its handles (ipc.hpp)

  // Results.
  int source_ = -1;
  std::vector<int32_t> failed_;
  bool localSuccess_ = false;

  // CUDA.
  bool cuda_ = false;
  std::shared_ptr<CudaLane> lane_;
  uint32_t ticket_ = 0;                     // counter value that releases the side stream
  std::vector<std::pair<at::Tensor, at::Tensor>> h2d_;  // (device dst, pinned host src)
  std::shared_ptr<void> doneEvent_;         // at::cuda::CUDAEvent recorded after the H2D copies
  bool eventReady_ = false;                 // doneEvent_ recorded (guarded by mutex_)
};

} // namespace mooncake
