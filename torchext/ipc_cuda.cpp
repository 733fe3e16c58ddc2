// CudaPeerMemory: CUDA IPC for the same-host device path (ipc.hpp). The scratch (two halves, each
// growing by doubling from 512 KiB) is device memory from cuMemAlloc (not torch's caching allocator, so its handle does not depend on the
// allocator's configuration: expandable segments cannot be exported with cuIpcGetMemHandle),
// exported with cuIpcGetMemHandle and mapped by peers with cuIpcOpenMemHandle (lazy peer access
// for ranks on other GPUs of the host). The driver's entry points come from libcuda.so.1 at run
// time, like cuStreamWaitValue32 (util.hpp), so the shim needs no link-time CUDA library beyond
// torch's. The op's device work runs on a stream of the device's pool; fence() synchronizes it.
// Without CUDA support makeCudaPeerMemory() returns nullptr.
#include "ipc.hpp"

#include <c10/util/Exception.h>

#ifdef MOONCAKE_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <optional>
#include <vector>
#endif

namespace mooncake {

#ifdef MOONCAKE_WITH_CUDA
namespace {

struct Driver {
  CUresult (*ctxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext) = nullptr;
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*memAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memFree)(CUdeviceptr) = nullptr;
  CUresult (*ipcGet)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*ipcOpen)(CUdeviceptr*, CUipcMemHandle, unsigned int) = nullptr;
  CUresult (*ipcClose)(CUdeviceptr) = nullptr;
  CUresult (*errorString)(CUresult, const char**) = nullptr;
  std::string missing;  // the first entry point not found

  Driver() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
      h = dlopen("libcuda.so.1", RTLD_NOW);
    }
    if (!h) {
      missing = "libcuda.so.1";
      return;
    }
    auto get = [&](auto& fn, std::initializer_list<const char*> names) {
      for (const char* n : names) {
        if (void* f = dlsym(h, n)) {
          fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(f);
          return;
        }
      }
      if (missing.empty()) {
        missing = *names.begin();
      }
    };
    get(ctxGetCurrent, {"cuCtxGetCurrent"});
    get(ctxSetCurrent, {"cuCtxSetCurrent"});
    get(primaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
    get(deviceGet, {"cuDeviceGet"});
    get(memAlloc, {"cuMemAlloc_v2", "cuMemAlloc"});
    get(memFree, {"cuMemFree_v2", "cuMemFree"});
    get(ipcGet, {"cuIpcGetMemHandle"});
    get(ipcOpen, {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"});
    get(ipcClose, {"cuIpcCloseMemHandle"});
    get(errorString, {"cuGetErrorString"});
  }

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (errorString) {
      errorString(r, &s);
    }
    return std::string(s ? s : "CUDA driver error ") + " (" + std::to_string(static_cast<int>(r)) + ")";
  }
};

const Driver& driver() {
  static Driver d;
  return d;
}

#define MC_CU(call, what)                                                              \
  do {                                                                                 \
    CUresult r_ = (call);                                                              \
    TORCH_CHECK(r_ == CUDA_SUCCESS, "cuda-ipc: ", what, ": ", driver().error(r_),      \
                " (MOONCAKE_PG_CUDA_IPC=0 stages through host memory instead)");       \
  } while (0)

struct Mapping {
  std::string handle;  // the peer's CUipcMemHandle bytes
  CUdeviceptr base = 0;
};

class CudaPeerMemory : public PeerMemory {
 public:
  ~CudaPeerMemory() override {
    const Driver& d = driver();
    if (!d.missing.empty()) {
      return;
    }
    for (auto& [k, m] : peers_) {
      if (m.base) {
        d.ipcClose(m.base);
      }
    }
    for (auto& [p, gen] : old_) {
      d.memFree(p);
    }
    if (scratch_) {
      d.memFree(scratch_);
    }
  }
  const char* kind() const override { return "cuda-ipc"; }

  bool usable(std::string* why) override {
    const Driver& d = driver();
    if (!d.missing.empty()) {
      *why = "the CUDA driver lacks " + d.missing;
      return false;
    }
    try {
      CUdeviceptr p = 0;  // on the device begin() bound

      MC_CU(d.memAlloc(&p, 4096), "cuMemAlloc");
      CUipcMemHandle h;
      CUresult r = d.ipcGet(&h, p);
      d.memFree(p);
      if (r != CUDA_SUCCESS) {
        *why = "cuIpcGetMemHandle: " + d.error(r);
        return false;
      }
    } catch (const std::exception& e) {
      *why = e.what();
      return false;
    }
    return true;
  }

  at::Tensor expose(const at::Tensor& t, IpcBlob* blob) override {
    const Driver& d = driver();
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    if (half_ < n) {
      size_t h = std::max<size_t>({n, 2 * half_, size_t(512) << 10});
      CUdeviceptr p = 0;
      MC_CU(d.memAlloc(&p, 2 * h), "cuMemAlloc of the scratch");
      CUipcMemHandle ih;
      CUresult r = d.ipcGet(&ih, p);
      if (r != CUDA_SUCCESS) {
        d.memFree(p);
        MC_CU(r, "cuIpcGetMemHandle");
      }
      if (scratch_) {
        old_.emplace_back(scratch_, seq());
      }
      scratch_ = p;
      half_ = h;
      std::memcpy(handle_, &ih, sizeof(ih));
      ++exports;
    }
    size_t off = static_cast<size_t>(nextHalf()) * half_;
    at::Tensor x = view(scratch_ + off, t.numel(), t.options());
    x.copy_(t.reshape({-1}));
    static_assert(sizeof(CUipcMemHandle) <= sizeof(IpcBlob::handle), "handle fits the blob");
    std::memcpy(blob->handle, handle_, sizeof(CUipcMemHandle));
    blob->offset = static_cast<int64_t>(off);
    blob->nbytes = static_cast<int64_t>(n);
    return x;
  }

  at::Tensor open(int peer, const IpcBlob& blob, const at::Tensor& like) override {
    const Driver& d = driver();
    std::string h(blob.handle, sizeof(CUipcMemHandle));
    Mapping& m = peers_[peer];
    if (m.handle != h) {
      if (m.base) {
        d.ipcClose(m.base);  // the peer grew its scratch: its old one goes after this op
        m.base = 0;
      }
      CUipcMemHandle ih;
      std::memcpy(&ih, blob.handle, sizeof(ih));
      MC_CU(d.ipcOpen(&m.base, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle of a peer's scratch");
      m.handle = h;
      ++opens;
    }
    return view(m.base + blob.offset, like.numel(), like.options());
  }

  void retire() override {
    for (auto it = old_.begin(); it != old_.end();) {
      if (mayFree(it->second)) {
        driver().memFree(it->first);
        it = old_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void fence() override { stream_->synchronize(); }

  void begin(const c10::Device& device) override {
    TORCH_CHECK(
        !device_.has_value() || *device_ == device, "cuda-ipc: the path serves one device (",
        *device_, ") per process, this op is on ", device);
    device_ = device;
    bind(device);
    auto it = pooled_.find(device.index());
    if (it == pooled_.end()) {
      it = pooled_.emplace(device.index(), c10::cuda::getStreamFromPool(false, device.index()))
               .first;
    }
    stream_.emplace(it->second);
    streamGuard_.emplace(it->second);
  }

  void end() override {
    streamGuard_.reset();
    guard_.reset();
  }

 private:
  // n elements at p on this process's device. The device is given, not looked up from the
  // pointer: a peer's scratch on another GPU of the host is read through peer access.
  at::Tensor view(CUdeviceptr p, int64_t n, const at::TensorOptions& o) const {
    return at::for_blob(reinterpret_cast<void*>(p), {n})
        .options(o.device(*device_))
        .target_device(*device_)
        .make_tensor();
  }

  // The device and its primary context current on this thread (the driver calls need it).
  void bind(const c10::Device& device) {
    guard_.emplace(device);
    const Driver& d = driver();
    CUcontext ctx = nullptr;
    MC_CU(d.ctxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (ctx == nullptr) {
      CUdevice dev;
      MC_CU(d.deviceGet(&dev, device.index()), "cuDeviceGet");
      MC_CU(d.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      MC_CU(d.ctxSetCurrent(ctx), "cuCtxSetCurrent");
    }
  }

  std::optional<c10::Device> device_;
  std::optional<c10::cuda::CUDAGuard> guard_;
  std::optional<c10::cuda::CUDAStream> stream_;
  std::map<int, c10::cuda::CUDAStream> pooled_;
  std::optional<c10::cuda::CUDAStreamGuard> streamGuard_;
  CUdeviceptr scratch_ = 0;  // two halves of half_ bytes
  size_t half_ = 0;
  char handle_[sizeof(CUipcMemHandle)] = {};
  std::vector<std::pair<CUdeviceptr, uint64_t>> old_;  // grown out of use, at op count
  std::map<int, Mapping> peers_;
};

} // namespace

std::unique_ptr<PeerMemory> makeCudaPeerMemory() {
  return std::make_unique<CudaPeerMemory>();
}
#else
std::unique_ptr<PeerMemory> makeCudaPeerMemory() {
  return nullptr;
}
#endif

} // namespace mooncake
