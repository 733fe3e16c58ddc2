// MooncakeWork: waiting (running unstarted ops on the waiting thread), completion and the Future.
#include "work.hpp"

#include <c10/util/Exception.h>

#include "mooncake_backend.hpp"
#include "util.hpp"

namespace mooncake {

MooncakeWork::MooncakeWork(const MooncakeBackend& b, c10d::OpType type, std::string opName,
                           std::vector<at::Tensor> outputs, std::vector<c10::Device> futureDevices)
    : c10d::Work(b.getRank(), type, nullptr, std::nullopt),
      opName_(std::move(opName)),
      backendName_(b.getBackendName()),
      outputs_(std::move(outputs)),
      timeout_(b.timeout_) {
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

} // namespace mooncake
