// IpcPath: the same-host device path's protocol (ipc.hpp has the overview). Per op, on the
// submit thread, after the op's inputs are ready:
//   1. copy the input into this rank's scratch half; all-gather the blobs (the control op: "my
//      scratch is filled, here is its handle"); map the peers' scratch (cached per handle);
//   2. the op's device work over the peers' buffers (torch ops on the path's stream);
//   3. allreduce only: fence, barrier, then gather the reduced chunks;
//   4. fence, and the work completes (no closing barrier: the scratch is double-buffered).
// A control op that fails or reports a failed rank fails the op and switches the path off for
// the group (later ops use staging, with its elastic semantics).
#include "ipc.hpp"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>

#include "mooncake_backend.hpp"
#include "op.hpp"
#include "util.hpp"

namespace mooncake {

namespace {

uint64_t hostIdentity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string id(host);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string b;
  if (boot >> b) {
    id += "/" + b;
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) {
    h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

// Applies rop elementwise: acc = acc (rop) x.
void fold(at::Tensor& acc, const at::Tensor& x, c10d::ReduceOp::RedOpType rop) {
  switch (rop) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG:
      acc.add_(x);
      break;
    case c10d::ReduceOp::PRODUCT:
      acc.mul_(x);
      break;
    case c10d::ReduceOp::MIN:
      at::minimum_out(acc, acc, x);
      break;
    case c10d::ReduceOp::MAX:
      at::maximum_out(acc, acc, x);
      break;
    default:
      TORCH_CHECK(false, "same-host device path: unsupported reduction");
  }
}

// Elements [begin, end) of rank k's share when n elements are split over size ranks.
std::pair<int64_t, int64_t> share(int64_t n, int size, int k) {
  int64_t per = (n + size - 1) / size;
  int64_t b = std::min<int64_t>(n, per * k);
  return {b, std::min<int64_t>(n, b + per)};
}

at::Tensor part(const at::Tensor& flat, std::pair<int64_t, int64_t> r) {
  return flat.narrow(0, r.first, r.second - r.first);
}

} // namespace

void MooncakeBackend::control(const char* what, const std::function<int(uint64_t*)>& fn) {
  uint64_t h = 0;
  TORCH_CHECK(fn(&h) == 0, where(what), ": ", lastError());
  const auto limit = std::chrono::milliseconds(std::max<int64_t>(timeout_.count(), 1000)) * 2 +
      std::chrono::seconds(60);
  mc_work_run(h);  // on this thread when its queue has not started it: no hand-off
  auto start = Clock::now();
  int rc;
  for (;;) {
    rc = mc_work_wait(h, 1000);
    if (rc != -2 || Clock::now() - start > limit) {
      break;
    }
  }
  // Still running: the op may write its buffers later, so the caller must not free them.
  TORCH_CHECK(rc != -2, where(what), ": timed out waiting for a peer (its buffers are leaked)");
  std::string err;
  if (rc != 0) {
    char buf[1024];
    int k = mc_work_error(h, buf, sizeof(buf));
    err = k > 0 ? std::string(buf) : lastError();
  }
  std::vector<int32_t> failed(std::max<int32_t>(maxGroupSize_, curSize_), 0);
  std::string dead;
  if (mc_work_failed_ranks(h, failed.data(), static_cast<int32_t>(failed.size())) >= 0) {
    for (size_t r = 0; r < failed.size(); ++r) {
      if (failed[r]) {
        dead += (dead.empty() ? "" : ",") + std::to_string(r);
      }
    }
  }
  bool ok = mc_work_is_success(h) == 1;
  mc_work_free(h);
  if (!dead.empty()) {
    throw IpcPeerFailed(where(what) + ": rank(s) " + dead + " failed during the op", failed);
  }
  TORCH_CHECK(err.empty(), where(what), ": ", err);
  TORCH_CHECK(ok, where(what), ": the op did not complete with every rank");
}

bool IpcPath::reducible(const at::Tensor& t, c10d::ReduceOp::RedOpType rop) {
  if (t.is_complex() || t.scalar_type() == at::kBool) {
    return false;
  }
  switch (rop) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      return true;
    case c10d::ReduceOp::AVG:
      return t.is_floating_point();
    default:
      return false;  // bitwise ops, PREMUL_SUM: staging
  }
}

PeerMemory* IpcPath::memoryFor(const c10::Device& d) {
  std::lock_guard<std::mutex> g(mu_);
  if (off_) {
    return nullptr;
  }
  if (d.is_cuda()) {
    static const bool on = envOn("MOONCAKE_PG_CUDA_IPC");
    if (!on) {
      return nullptr;
    }
    if (!cudaMade_) {
      cudaMade_ = true;
      cuda_ = makeCudaPeerMemory();
    }
    return cuda_.get();
  }
  static const bool fake = [] {
    const char* v = std::getenv("MOONCAKE_PG_IPC_FAKE");
    return v != nullptr && std::string(v) == "1";
  }();
  if (!fake || !d.is_cpu()) {
    return nullptr;
  }
  if (!shmMade_) {
    shmMade_ = true;
    shm_ = makeShmPeerMemory();
  }
  return shm_.get();
}

std::map<std::string, int64_t> IpcPath::stats() {
  std::lock_guard<std::mutex> g(mu_);
  std::map<std::string, int64_t> out{{"ops", ops.load()}, {"off", off_ ? 1 : 0}};
  for (PeerMemory* m : {cuda_.get(), shm_.get()}) {
    if (m != nullptr) {
      std::string k = m->kind();
      out[k + ".state"] = state_[m];
      out[k + ".exports"] = m->exports.load();
      out[k + ".opens"] = m->opens.load();
    }
  }
  return out;
}

std::map<std::string, int64_t> MooncakeBackend::ipcStats() {
  return ipc_->stats();
}

int IpcPath::state(PeerMemory* m) {
  std::lock_guard<std::mutex> g(mu_);
  return state_[m];
}

void IpcPath::setState(PeerMemory* m, int s) {
  std::lock_guard<std::mutex> g(mu_);
  state_[m] = s;
}

std::vector<IpcBlob> IpcPath::exchange(MooncakeBackend& b, const IpcBlob& mine, const char* what) {
  int n = b.curSize_;
  // Heap buffers, released only once the op finished (a stuck op leaks them: see control).
  auto in = std::make_unique<IpcBlob>(mine);
  auto gathered = std::make_unique<std::vector<IpcBlob>>(n);
  auto outs = std::make_unique<std::vector<void*>>(n);
  for (int r = 0; r < n; ++r) {
    (*outs)[r] = &(*gathered)[r];
  }
  uint64_t pg = b.pg_;
  try {
    b.control(what, [&](uint64_t* h) {
      return mc_pg_allgather(pg, in.get(), sizeof(IpcBlob), outs->data(), n, h);
    });
  } catch (const c10::Error& e) {
    if (std::string(e.what()).find("buffers are leaked") != std::string::npos) {
      in.release();
      gathered.release();
      outs.release();
    }
    throw;
  }
  std::vector<IpcBlob> all = *gathered;
  for (int r = 0; r < n; ++r) {
    TORCH_CHECK(
        all[r].magic == IpcBlob::kMagic, b.where(what), ": rank ", r,
        " sent no same-host device path record (the ranks disagree on the path)");
  }
  return all;
}

void IpcPath::barrier(MooncakeBackend& b, const char* what) {
  uint64_t pg = b.pg_;
  b.control(what, [&](uint64_t* h) { return mc_pg_barrier(pg, h); });
}

void IpcPath::handshake(MooncakeBackend& b, PeerMemory* m, const c10::Device& device) {
  IpcBlob mine;
  mine.magic = IpcBlob::kMagic;
  mine.host = hostIdentity();
  std::string why;
  bool usable = false;
  try {
    m->begin(device);
    usable = m->usable(&why);
  } catch (const std::exception& e) {
    why = e.what();
  }
  m->end();
  if (usable) {
    mine.flags = IpcBlob::kUsable;
  } else {
    LOG(INFO) << b.getBackendName() << ": rank " << b.getRank() << ": " << m->kind()
              << " unusable (" << why << "); staging";
  }
  auto all = exchange(b, mine, "same-host device path handshake");
  bool on = true;
  for (auto& x : all) {
    on = on && x.host == mine.host && (x.flags & IpcBlob::kUsable);
  }
  setState(m, on ? 1 : -1);
}

void IpcPath::run(MooncakeBackend& b, PeerMemory* m, const IpcJob& job) {
  const int n = b.curSize_;
  const int me = b.getRank();
  const char* what = "same-host device path";
  wrote_ = false;
  m->begin(job.src.device());
  struct End {
    PeerMemory* m;
    ~End() { m->end(); }
  } end{m};
  IpcBlob mine;
  at::Tensor x = m->expose(job.src, &mine);
  mine.magic = IpcBlob::kMagic;
  mine.flags = IpcBlob::kExposed;
  auto all = exchange(b, mine, what);
  m->retire();
  at::Tensor flat = x.view({-1});
  // Every rank checks every record before reading any: a size mismatch fails the op on all.
  for (int k = 0; k < n; ++k) {
    TORCH_CHECK(
        all[k].nbytes == mine.nbytes, b.where(what), ": rank ", k, " has a ", all[k].nbytes,
        "-byte buffer, this rank ", mine.nbytes);
  }
  std::vector<at::Tensor> peer(n);
  for (int k = 0; k < n; ++k) {
    peer[k] = k == me ? flat : m->open(k, all[k], flat);
  }
  const int64_t numel = flat.numel();
  // The tensor the results go to, written flat (a contiguous stand-in where it is not).
  const at::Tensor& target = job.dst.defined() ? job.dst : job.src;
  at::Tensor out = target.is_contiguous() ? target
                                          : at::empty_like(target, at::MemoryFormat::Contiguous);
  at::Tensor o = out.view({-1});
  wrote_ = job.kind != IpcJob::kAllReduce;
  switch (job.kind) {
    case IpcJob::kAllReduce: {
      // Reduce-scatter: rank me folds every peer's share me into its own scratch (nobody else
      // reads or writes that share meanwhile), then gathers every rank's reduced share.
      auto mineShare = share(numel, n, me);
      at::Tensor acc = part(flat, mineShare);
      for (int k = 0; k < n; ++k) {
        if (k != me) {
          fold(acc, part(peer[k], mineShare), job.rop);
        }
      }
      if (job.rop == c10d::ReduceOp::AVG) {
        acc.div_(n);
      }
      m->fence();
      barrier(b, what);  // every share is reduced
      wrote_ = true;
      for (int k = 0; k < n; ++k) {
        auto s = share(numel, n, k);
        part(o, s).copy_(part(peer[k], s));
      }
      break;
    }
    case IpcJob::kBroadcast:
      o.copy_(peer[job.root]);
      break;
    case IpcJob::kAllGather:
      for (int k = 0; k < n; ++k) {
        if (job.dsts.empty()) {
          o.narrow(0, k * numel, numel).copy_(peer[k]);
        } else {
          job.dsts[k].copy_(peer[k].view(job.dsts[k].sizes()));
        }
      }
      break;
    case IpcJob::kReduceScatter: {
      int64_t per = numel / n;
      o.copy_(flat.narrow(0, me * per, per));
      for (int k = 0; k < n; ++k) {
        if (k != me) {
          fold(o, peer[k].narrow(0, me * per, per), job.rop);
        }
      }
      if (job.rop == c10d::ReduceOp::AVG) {
        o.div_(n);
      }
      break;
    }
    case IpcJob::kAllToAll: {
      int64_t per = numel / n;
      for (int k = 0; k < n; ++k) {
        o.narrow(0, k * per, per).copy_(peer[k].narrow(0, me * per, per));
      }
      break;
    }
  }
  bool wrote = !(job.kind == IpcJob::kAllGather && !job.dsts.empty());
  if (wrote && !out.is_same(target)) {
    target.copy_(out);
  }
  m->fence();  // this rank's reads and writes are done (its scratch half is free: see ipc.hpp)
  ++ops;
}

bool IpcPath::rerun(MooncakeBackend& b, PeerMemory* m, const IpcJob& job, MooncakeWork& w) {
  if (job.kind != IpcJob::kAllReduce && job.kind != IpcJob::kBroadcast) {
    return false;
  }
  const at::Tensor& t = job.src;
  bool direct = t.is_cpu() && t.is_contiguous();
  at::Tensor h = direct ? t
                        : at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()),
                                    at::MemoryFormat::Contiguous);
  if (!direct) {
    m->begin(t.device());
    h.copy_(t);
    m->fence();
    m->end();
  }
  uint64_t handle = 0;
  int rc = job.kind == IpcJob::kAllReduce
      ? mc_pg_allreduce(b.pg_, h.data_ptr(), job.count, job.dtype, job.cop, &handle)
      : mc_pg_broadcast(b.pg_, h.data_ptr(), nbytesOf(h), job.root, &handle);
  TORCH_CHECK(rc == 0, b.where("same-host device path rerun"), ": ", lastError());
  w.handles_.push_back(handle);
  w.keep_.push_back(h);
  if (!direct) {
    // The result goes back to t once the rerun is done (the completion thread then finds the
    // handle done and reports it).
    while ((rc = mc_work_wait(handle, 1000)) == -2) {
    }
    if (rc == 0) {
      m->begin(t.device());
      t.copy_(h);
      m->fence();
      m->end();
    }
  }
  return true;
}

} // namespace mooncake

namespace mooncake {

namespace {

std::string messageOf(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) {
    return c->what_without_backtrace();
  }
  return e.what();
}

} // namespace

c10::intrusive_ptr<c10d::Work> MooncakeBackend::Op::viaIpc(
    IpcJob job, std::vector<at::Tensor> outputs) {
  MooncakeBackend* b = b_;
  if (!b->cuda_ || !deviceSet_ || size() < 2 || job.src.numel() == 0 || b->closed_.load()) {
    return {};
  }
  IpcPath& path = *b->ipc_;
  PeerMemory* m = path.memoryFor(device_);
  // The path needs the whole group: after a failure the staging path's elastic rules apply.
  if (m == nullptr || b->activeCount() != size()) {
    return {};
  }
  c10::Device device = device_;
  if (path.state(m) == 0) {
    // Once per group and memory kind, in order with the ops already queued.
    auto done = std::make_shared<std::promise<void>>();
    {
      std::lock_guard<std::mutex> g(b->smu_);
      b->submits_.push_back([b, m, device, done, &path]() {
        try {
          path.handshake(*b, m, device);
        } catch (const std::exception& e) {
          LOG(WARNING) << b->getBackendName() << ": same-host device path handshake failed: "
                       << messageOf(e) << "; staging";
          path.setState(m, -1);
        }
        done->set_value();
      });
    }
    b->scv_.notify_one();
    done->get_future().wait();
  }
  if (path.state(m) != 1) {
    return {};
  }
  std::vector<c10::Device> futDevices;
  if (device.is_cuda()) {
    futDevices.push_back(device);
  }
  auto w = c10::make_intrusive<MooncakeWork>(*b, type_, name_, outputs, futDevices);
  w->keep_ = std::move(outputs);
  std::function<void()> inputsReady;  // waits for the work queued before the op on its stream
#ifdef MOONCAKE_WITH_CUDA
  if (device.is_cuda()) {
    inputsReady = w->stageCuda(*b, device, {});
  }
#endif
  {
    std::lock_guard<std::mutex> g(b->smu_);
    b->submits_.push_back([b, w, job = std::move(job), m, inputsReady, &path]() {
      try {
        if (inputsReady) {
          inputsReady();
        }
        path.run(*b, m, job);
      } catch (const IpcPeerFailed& e) {
        // The group agreed on the failure: finish the op over the survivors like staging does.
        path.disable();
        w->priorFailed_ = e.failed;
        const char* how = "the op's outputs are complete";
        try {
          if (!path.wrote()) {
            how = "rerun over the survivors through host memory";
            if (!path.rerun(*b, m, job, *w)) {
              how = "the op fails (no rerun for it on this path)";
              w->submitError_ = e.what();
            }
          }
        } catch (const std::exception& e2) {
          w->submitError_ = messageOf(e2);
        }
        LOG(WARNING) << b->getBackendName() << ": " << e.what() << "; " << how
                     << "; later ops stage through host memory";
      } catch (const std::exception& e) {
        path.disable();
        w->submitError_ = messageOf(e);
        LOG(WARNING) << b->getBackendName() << ": " << w->submitError_
                     << "; later ops stage through host memory";
      }
      b->enqueueCompletion(w);
    });
  }
  b->scv_.notify_one();
  return w;
}

} // namespace mooncake
