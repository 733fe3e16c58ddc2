// MooncakeBackend's lifecycle: creating the group in libmooncake, shutting it down (joining the
// backend's threads first), and the elastic-membership queries.
#include "mooncake_backend.hpp"

#include <Python.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "mooncake_pg_seam.h"
#include "util.hpp"

namespace mooncake {

bool builtWithCuda() {
#ifdef MOONCAKE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

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

MooncakeBackend::MooncakeBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const BackendOptions& options)
    : c10d::Backend(rank, size),
      cuda_(options.cuda),
      timeout_(options.timeout),
      groupName_(options.groupName),
      options_(options),
      curSize_(size) {
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
  cfg.device_type = cuda_ ? 1 : 0;
  cfg.timeout_ms = timeout_.count() > 0 ? timeout_.count() : 0;
  cfg.group_name = groupName_.c_str();
  // The transfer-status seam (faultseam/): consulted by the data path only when a fault
  // injector interposes its methods (upstream's tests LD_PRELOAD one); otherwise left out.
  if (mooncake_pg_seam_interposed() != 0) {
    seam_ = mooncake_pg_seam_open(options.maxGroupSize > size ? options.maxGroupSize : size);
    if (seam_ != nullptr) {
      cfg.transfer_check = &mooncake_pg_seam_check;
      cfg.transfer_ctx = seam_;
    }
  }
  int rc = mc_pg_create(&cfg, &bridge_->ops, &pg_);
  if (rc != 0 && seam_ != nullptr) {
    mooncake_pg_seam_close(seam_);
    seam_ = nullptr;
  }
  TORCH_CHECK(
      rc == 0, getBackendName(), ": creating group '", groupName_, "' failed on rank ", rank,
      " of ", size, ": ", lastError());
  maxGroupSize_ = mc_pg_max_group_size(pg_);
  worldSizeWord_ = mc_pg_world_size_word(pg_);
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
  if (seam_ != nullptr) {
    mooncake_pg_seam_close(seam_);
    seam_ = nullptr;
  }
}

std::string MooncakeBackend::where(const char* op) const {
  // Plain concatenation and std::to_string: no stream, no locale facet. On a CUDA host (an
  // H200, torch 2.11, GCC 13.3 headers over GCC 14's libstdc++) formatting an int through an
  // ostringstream here crashed; MOONCAKE_PG_SEGV_TRACE=1 showed it.
  return getBackendName() + " " + op + " (rank " + std::to_string(rank_) + " of " +
      std::to_string(curSize_) + ")";
}

void MooncakeBackend::refreshSize() {
  if (worldSizeWord_ != nullptr) {
    int32_t n = __atomic_load_n(worldSizeWord_, __ATOMIC_ACQUIRE);
    if (n > 0) {
      curSize_ = n;
      compat::setIfWritable(size_, n);
    }
  }
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

int MooncakeBackend::activeCount() {
  int32_t n = mc_pg_active_count(pg_);
  return n > 0 ? n : curSize_;
}

int64_t MooncakeBackend::currentEpoch() {
  TORCH_CHECK(!closed_.load(), getBackendName(), ": the process group was destroyed");
  int64_t e = mc_pg_current_epoch(pg_);
  TORCH_CHECK(e >= 0, getBackendName(), ": get_current_epoch failed: ", lastError());
  return e;
}

} // namespace mooncake
