// The backend's threads: the completion thread, which finishes works in submission order once
// libmooncake says their parts are done (copy-backs, elastic results, the Future), and, for CUDA
// backends, the submit thread, which hands ops to the group once their device->host copies are
// done.
#include <c10/util/Exception.h>

#include <algorithm>

#include "mooncake_backend.hpp"
#include "util.hpp"

#ifdef MOONCAKE_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace mooncake {

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
  std::vector<int32_t> failed(std::max<int32_t>(maxGroupSize_, curSize_), 0);
  for (size_t i = 0; i < w->priorFailed_.size() && i < failed.size(); ++i) {
    if (w->priorFailed_[i]) {
      failed[i] = 1;
      localOk = false;  // completed without some ranks (the same-host device path's control)
    }
  }
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
    w->finishCuda(eptr);
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

} // namespace mooncake
