// Python module mooncake._pg_ext: creates MooncakeBackend instances for the creator registered
// by python/mooncake/pg.py and exposes the elastic queries over backends and works.
#include <execinfo.h>
#include <torch/extension.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include "mooncake_backend.hpp"

#ifndef MOONCAKE_TORCH_VERSION
#define MOONCAKE_TORCH_VERSION "unknown"
#endif

namespace py = pybind11;

namespace {

mooncake::MooncakeBackend* asMooncake(const c10::intrusive_ptr<c10d::Backend>& b) {
  TORCH_CHECK(b, "expected a mooncake process-group backend, got None");
  auto* mb = dynamic_cast<mooncake::MooncakeBackend*>(b.get());
  TORCH_CHECK(
      mb, "expected a mooncake process-group backend, got backend '", b->getBackendName(), "'");
  return mb;
}

mooncake::MooncakeWork* asMooncakeWork(const c10::intrusive_ptr<c10d::Work>& w) {
  TORCH_CHECK(w, "expected a Work returned by a mooncake backend op, got None");
  auto* mw = dynamic_cast<mooncake::MooncakeWork*>(w.get());
  TORCH_CHECK(mw, "expected a Work returned by a mooncake backend op (use async_op=True)");
  return mw;
}

// MOONCAKE_PG_SEGV_TRACE=1: on the first SIGSEGV/SIGBUS, write the native backtrace of the
// faulting thread to stderr, then hand the fault to the handler that was there before (Go's
// runtime, Python's faulthandler). A debugging aid for crashes inside torch or the shim, which
// Python's faulthandler shows without their C++ frames; read the offsets with addr2line on a
// MOONCAKE_DEBUG_BUILD=1 build.
struct sigaction oldSegv, oldBus;

void segvTrace(int sig, siginfo_t*, void*) {
  static const char msg[] = "mooncake._pg_ext: fatal signal; native backtrace:\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  sigaction(sig, sig == SIGSEGV ? &oldSegv : &oldBus, nullptr);  // the fault recurs there
}

void installSegvTrace() {
  const char* v = std::getenv("MOONCAKE_PG_SEGV_TRACE");
  if (v == nullptr || *v == '\0' || *v == '0') {
    return;
  }
  struct sigaction sa {};
  sa.sa_sigaction = segvTrace;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &oldSegv);
  sigaction(SIGBUS, &sa, &oldBus);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  installSegvTrace();
  m.doc() = "Mooncake c10d backend shim over libmooncake.so";
  py::module_::import("torch.distributed");
  m.attr("TORCH_VERSION") = MOONCAKE_TORCH_VERSION;
  m.attr("WITH_CUDA") = mooncake::builtWithCuda();
  // How this build was compiled, for scripts/stdcxx_probe.py and scripts/gpu_check.sh: the
  // compiler, the C++ library headers and the string ABI they were used with (compare with
  // torch._C._GLIBCXX_USE_CXX11_ABI; docs/cuda.md).
  py::dict info;
  info["compiler"] = __VERSION__;
  info["glibcxx_use_cxx11_abi"] = static_cast<int>(_GLIBCXX_USE_CXX11_ABI);
  info["glibcxx_release"] = static_cast<int>(_GLIBCXX_RELEASE);
  info["glibcxx_date"] = static_cast<long>(__GLIBCXX__);
  info["cplusplus"] = static_cast<long>(__cplusplus);
  m.attr("BUILD_INFO") = info;
  // Formats a number the way every TORCH_CHECK message of the shim does (c10::str: an
  // ostringstream built in the shim, then std::ostream::_M_insert<long>/<double>): the path
  // that crashed on the H200. scripts/stdcxx_probe.py calls it in a child process.
  m.def("_format_probe", [](int64_t v) {
    return c10::str("n=", v, " x=", 0.5 * static_cast<double>(v));
  });

  py::class_<
      mooncake::MooncakeBackend,
      c10d::Backend,
      c10::intrusive_ptr<mooncake::MooncakeBackend>>(m, "MooncakeBackend")
      .def_property_readonly("handle", &mooncake::MooncakeBackend::handle)
      .def("max_group_size", &mooncake::MooncakeBackend::maxGroupSize)
      .def(
          "active_ranks",
          &mooncake::MooncakeBackend::activeRanks,
          py::call_guard<py::gil_scoped_release>())
      .def(
          "current_epoch",
          &mooncake::MooncakeBackend::currentEpoch,
          py::call_guard<py::gil_scoped_release>())
      .def(
          "shutdown_group",
          &mooncake::MooncakeBackend::shutdownGroup,
          py::call_guard<py::gil_scoped_release>());

  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store,
         int rank,
         int size,
         int64_t timeoutMs,
         const std::string& groupName,
         int maxGroupSize,
         bool isExtension,
         bool autoDeactivate,
         bool autoSync,
         bool cuda) -> c10::intrusive_ptr<c10d::Backend> {
        mooncake::BackendOptions o;
        o.timeout = std::chrono::milliseconds(timeoutMs);
        o.groupName = groupName;
        o.cuda = cuda;
        o.maxGroupSize = maxGroupSize;
        o.isExtension = isExtension;
        o.autoDeactivateOnFailure = autoDeactivate;
        o.autoSyncOnFailure = autoSync;
        return c10::make_intrusive<mooncake::MooncakeBackend>(store, rank, size, o);
      },
      py::arg("store"),
      py::arg("rank"),
      py::arg("size"),
      py::arg("timeout_ms"),
      py::arg("group_name"),
      py::arg("max_group_size") = 0,
      py::arg("is_extension") = false,
      py::arg("auto_deactivate_on_failure") = true,
      py::arg("auto_sync_on_failure") = true,
      py::arg("cuda") = false,
      py::call_guard<py::gil_scoped_release>());

  m.def(
      "is_mooncake_backend",
      [](const c10::intrusive_ptr<c10d::Backend>& b) {
        return b && dynamic_cast<mooncake::MooncakeBackend*>(b.get()) != nullptr;
      });
  m.def(
      "get_active_ranks",
      [](const c10::intrusive_ptr<c10d::Backend>& b) {
        std::vector<int32_t> v;
        {
          // It first applies membership decisions on the group's op queue, after the ops
          // queued before it: other Python threads run meanwhile.
          py::gil_scoped_release nogil;
          v = asMooncake(b)->activeRanks();
        }
        return torch::tensor(v, torch::kInt32);
      });
  m.def("get_current_epoch", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    return asMooncake(b)->currentEpoch();
  });
  m.def(
      "refresh_size",
      [](const c10::intrusive_ptr<c10d::Backend>& b) {
        auto* mb = asMooncake(b);
        mb->refreshSize();
        return mb->currentSize();
      });
  // The same-host device path's counters (tests and scripts/gpu_check.sh).
  m.def("_ipc_stats", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    return asMooncake(b)->ipcStats();
  });
  m.def("get_max_group_size", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    return asMooncake(b)->maxGroupSize();
  });
  m.def("get_failed_ranks_hint", [](const c10::intrusive_ptr<c10d::Work>& w) {
    auto* mw = asMooncakeWork(w);
    TORCH_CHECK(
        mw->isCompleted(), "get_failed_ranks_hint: the work has not completed (call wait() first)");
    auto v = mw->failedRanks();
    std::vector<int64_t> ranks;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i]) {
        ranks.push_back(static_cast<int64_t>(i));
      }
    }
    return ranks;
  });
  m.def("get_failed_ranks_mask", [](const c10::intrusive_ptr<c10d::Work>& w) {
    auto v = asMooncakeWork(w)->failedRanks();
    return torch::tensor(std::vector<int32_t>(v.begin(), v.end()), torch::kInt32);
  });
  m.def("get_local_success", [](const c10::intrusive_ptr<c10d::Work>& w) {
    return asMooncakeWork(w)->localSuccess();
  });
}
