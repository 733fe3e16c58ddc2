// The CUDA side of a work (backend "mooncake" with CUDA tensors): ordering the group's host
// buffers after the inputs' device->host copies, the result copies on the device's side stream
// (gated by the lane's counter where stream memory operations exist) and the event that
// Work::wait()/synchronize() make the caller's stream wait on. Without CUDA support only
// synchronize() is built (a no-op).
#include <c10/util/Exception.h>

#include "mooncake_backend.hpp"
#include "util.hpp"

#ifdef MOONCAKE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mooncake {

void MooncakeWork::synchronize() {
#ifdef MOONCAKE_WITH_CUDA
  if (cuda_ && doneEvent_) {
    auto* ev = static_cast<at::cuda::CUDAEvent*>(doneEvent_.get());
    auto cur = c10::cuda::getCurrentCUDAStream(lane_->device.index());
    ev->block(cur);
  }
#endif
}

#ifdef MOONCAKE_WITH_CUDA
namespace {

// Enqueues the copies of the staged results into their device tensors on the lane's stream.
void copyResults(const std::vector<std::pair<at::Tensor, at::Tensor>>& h2d, CudaLane& lane) {
  for (auto& [dst, src] : h2d) {
    if (dst.numel() > 0) {
      dst.copy_(src, /*non_blocking=*/true);
    }
    c10::cuda::CUDACachingAllocator::recordStream(dst.storage().data_ptr(), lane.stream);
  }
}

} // namespace

std::function<void()> MooncakeWork::stageCuda(
    MooncakeBackend& b, const c10::Device& device,
    std::vector<std::pair<at::Tensor, at::Tensor>> h2d) {
  cuda_ = true;
  lane_ = b.lane(device);
  c10::cuda::CUDAGuard guard(device);
  auto cur = c10::cuda::getCurrentCUDAStream(device.index());
  auto d2h = std::make_shared<at::cuda::CUDAEvent>();
  d2h->record(cur);
  h2d_ = std::move(h2d);
  auto ev = std::make_shared<at::cuda::CUDAEvent>();
  doneEvent_ = ev;
  auto& lane = *lane_;
  std::lock_guard<std::mutex> g(b.laneMu_);
  ticket_ = lane.nextTicket++;
  if (lane.useWaitValue) {
    // Gate the side stream on the completion counter, then enqueue the result copies.
    d2h->block(lane.stream);
    CUresult cr = waitValueFn()(
        lane.stream.stream(),
        reinterpret_cast<CUdeviceptr>(lane.counter.data_ptr()),
        ticket_,
        CU_STREAM_WAIT_VALUE_GEQ);
    TORCH_CHECK(
        cr == CUDA_SUCCESS, b.where(opName_.c_str()),
        ": cuStreamWaitValue32 failed with CUDA driver error ", static_cast<int>(cr),
        " (set MOONCAKE_PG_NO_STREAM_WAIT_VALUE=1 to avoid it)");
    c10::cuda::CUDAStreamGuard sg(lane.stream);
    copyResults(h2d_, lane);
    ev->record(lane.stream);
    eventReady_ = true;
  }
  return [d2h] { d2h->synchronize(); };
}

void MooncakeWork::finishCuda(std::exception_ptr& eptr) {
  try {
    auto& lane = *lane_;
    c10::cuda::CUDAGuard guard(lane.device);
    auto* ev = static_cast<at::cuda::CUDAEvent*>(doneEvent_.get());
    if (lane.useWaitValue) {
      lane.release(ticket_);
    } else {
      c10::cuda::CUDAStreamGuard sg(lane.stream);
      if (!eptr) {
        copyResults(h2d_, lane);
      }
      ev->record(lane.stream);
      {
        std::lock_guard<std::mutex> g(mutex_);
        eventReady_ = true;
      }
      cv_.notify_all();
    }
    ev->synchronize();
  } catch (...) {
    if (!eptr) {
      eptr = std::current_exception();
    }
  }
}
#endif

} // namespace mooncake
