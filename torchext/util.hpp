// Small helpers every part of the shim uses: buffer pointers for the C ABI, the library's last
// error, environment switches, and the CUDA lane (a device's side stream and completion counter).
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mooncake_pg.h"

#ifdef MOONCAKE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>
#endif

extern "C" const char* mooncake_last_error(void);

namespace mooncake {

using Clock = std::chrono::steady_clock;

// A valid address for zero-byte buffers (the C ABI may reject NULL).
alignas(64) inline uint8_t kEmpty[64];

inline void* ptrOf(const at::Tensor& t) {
  return t.numel() == 0 ? static_cast<void*>(kEmpty) : t.data_ptr();
}

inline int64_t nbytesOf(const at::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

inline std::string lastError() {
  const char* e = mooncake_last_error();
  return (e && *e) ? std::string(e) : std::string("unknown error");
}

// An on/off switch from the environment, on unless set to "0".
inline bool envOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}

#ifdef MOONCAKE_WITH_CUDA
using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, uint32_t, unsigned int);

// cuStreamWaitValue32 from the driver, or nullptr where it is missing or switched off.
inline WaitValueFn waitValueFn() {
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

} // namespace mooncake
