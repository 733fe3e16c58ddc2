// MooncakeBackend::Op builds one work: it checks the op's arguments (TORCH_CHECK -> RuntimeError
// naming the backend, the op, the rank and the problem), stages tensors into contiguous host
// buffers, turns them into mc_pg_* calls and submits them (launch). The op overrides in
// collectives.cpp and p2p.cpp are a few calls on an Op each.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipc.hpp"
#include "mooncake_backend.hpp"

namespace mooncake {

// The reduction of one tensor as the C ABI takes it.
struct ReduceArgs {
  int32_t dtype;
  int32_t op;
  int64_t count;  // elements of the (possibly real-viewed) dtype
};

// Buffer pointers that the submitted calls read until the work completes.
template <typename T>
using Ptrs = std::shared_ptr<std::vector<T*>>;

// Whether torch will wait on the op at once (c10d's asyncOp=False, the default of every
// collective call); false on torch versions whose options have no asyncOp.
template <typename O>
auto isSyncImpl(const O& o, int) -> decltype(o.asyncOp, bool()) {
  return !o.asyncOp;
}
template <typename O>
bool isSyncImpl(const O&, long) {
  return false;
}
template <typename O>
bool isSync(const O& o) {
  return isSyncImpl(o, 0);
}

class MooncakeBackend::Op {
 public:
  // Point-to-point ops: never synchronous.
  Op(MooncakeBackend* b, c10d::OpType type);
  // Collectives: a synchronous CPU op runs on the calling thread (torch waits for it right
  // away): no hand-off to the group's op thread and back through the completion thread.
  template <typename O>
  Op(MooncakeBackend* b, c10d::OpType type, const O& opts) : Op(b, type) {
    sync_ = isSync(opts);
  }

  std::string where() const { return b_->where(name_); }
  // Names the op in messages when its OpType does not (see compat::TensorCoalesced).
  void setName(const char* name) { name_ = name; }
  int size() const { return b_->curSize_; }

  // ---- argument checks (each raises with the op's location on failure)

  // Validates a tensor and fixes the op's device (all tensors of one op share a device).
  void check(const at::Tensor& t, const char* what);
  // ts holds exactly one tensor (a `what` tensor); checked as `as` too when as is given.
  at::Tensor& single(std::vector<at::Tensor>& ts, const char* what, const char* as = nullptr);
  // The root of a rooted collective: rootTensor (where the options have one) is 0 and rootRank
  // is a rank of the group.
  template <typename O>
  int32_t root(const O& opts) {
    checkRootTensor(opts, 0);
    checkRank(opts.rootRank, size(), "root");
    return static_cast<int32_t>(opts.rootRank);
  }
  // send/recv: tensors holds one tensor; peer is a rank of the group (up to max_group_size)
  // other than this one. Returns the tensor.
  at::Tensor& p2p(std::vector<at::Tensor>& tensors, int peer, bool send);
  void sameType(const at::Tensor& a, const at::Tensor& b, const char* aName, const char* bName);
  // A list (`what`: "output tensor list" ...) has one entry per rank of the group.
  // A list of one tensor per rank below the world size, or (after a failure) one per active rank.
  void groupList(size_t n, const char* what);
  // How many parts of part's size whole holds (wholeGroup checked it): the world size or the
  // active ranks.
  int parts(const at::Tensor& whole, const at::Tensor& part);
  // allgather/reduce_scatter: mine holds this rank's one tensor, lists one list of a tensor per
  // rank like it (outputs for allgather, inputs for reduce_scatter). Returns that list.
  std::vector<at::Tensor>& perRank(
      std::vector<at::Tensor>& mine, std::vector<std::vector<at::Tensor>>& lists,
      bool listIsOutput);
  // gather/scatter: the same on the root rootRank; elsewhere lists must be empty. Returns the
  // list the root passed (empty elsewhere).
  std::vector<at::Tensor> rooted(
      std::vector<at::Tensor>& mine, std::vector<std::vector<at::Tensor>>& lists,
      int64_t rootRank, bool listIsOutput);
  // outputs and inputs pair up one to one.
  void pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs);
  // A whole-group buffer op: out holds size() x in's elements (allgather into a tensor) or in
  // holds size() x out's (reduce-scatter, outIsWhole=false). index: the pair's index in a
  // coalesced op, or -1.
  void wholeGroup(const at::Tensor& out, const at::Tensor& in, bool outIsWhole, int index = -1);
  // The reduction of t by rop as the kernels take it, or raises when they cannot.
  ReduceArgs reduction(const at::Tensor& t, const c10d::ReduceOp& rop);
  // Per-rank byte counts of t's dim-0 split (empty split: equal parts).
  std::vector<int64_t> splitBytes(const at::Tensor& t, const std::vector<int64_t>& s,
                                  const char* what);

  // ---- staging: contiguous host tensors the op's calls read and write

  bool staged() const { return deviceSet_ && device_.is_cuda(); }
  // A contiguous host tensor holding t's data (read by the op).
  at::Tensor in(const at::Tensor& t) { return stage(t, /*read=*/true, /*write=*/false); }
  // Same, and the op's result is copied back into t.
  at::Tensor inout(const at::Tensor& t) { return stage(t, true, true); }
  // A contiguous host tensor the op writes; copied back into t.
  at::Tensor out(const at::Tensor& t) { return stage(t, false, true); }
  // in()/out() of each tensor.
  Ptrs<const void> ins(const std::vector<at::Tensor>& ts);
  Ptrs<void> outs(const std::vector<at::Tensor>& ts);

  // ---- calls: each adds one mc_pg_* call over staged buffers

  void broadcast(const at::Tensor& buf, int32_t root);
  void allreduce(const at::Tensor& buf, ReduceArgs ra);
  void reduce(const at::Tensor& buf, ReduceArgs ra, int32_t root);
  void allgather(const at::Tensor& in, Ptrs<void> outs);
  // in, gathered into one whole-group tensor out.
  void allgatherInto(const at::Tensor& out, const at::Tensor& in);
  void gather(const at::Tensor& in, Ptrs<void> outs, int32_t root);
  void scatter(Ptrs<const void> ins, const at::Tensor& out, int32_t root);
  void reduceScatter(Ptrs<const void> ins, const at::Tensor& out, ReduceArgs ra);
  // The whole-group tensor in, reduced and scattered into out.
  void reduceScatterFrom(const at::Tensor& out, const at::Tensor& in, ReduceArgs ra);
  void alltoall(Ptrs<const void> ins, std::vector<int64_t> inBytes, Ptrs<void> outs,
                std::vector<int64_t> outBytes);
  void send(const at::Tensor& buf, int dst, int tag);
  void recv(const at::Tensor& buf, int src, int tag);
  void barrier();

  // Runs the op on the same-host device path (ipc.hpp) when it applies; nullptr: stage it.
  c10::intrusive_ptr<c10d::Work> viaIpc(IpcJob job, std::vector<at::Tensor> outputs);

  // Submits the calls and returns the work. outputs are what Future/result() report.
  c10::intrusive_ptr<c10d::Work> launch(std::vector<at::Tensor> outputs);

 private:
  void checkRank(int64_t r, int size, const char* what);
  // n lists were passed where one is expected.
  void oneList(size_t n, bool root, bool output);
  // One tensor per rank, each like `one` (dtype, element count); list holds outputs, or inputs.
  void peerList(const std::vector<at::Tensor>& list, const at::Tensor& one, bool listIsOutput);
  void call(std::function<int(uint64_t*)> fn) { calls_.push_back(std::move(fn)); }
  template <typename O>
  auto checkRootTensor(const O& o, int) -> decltype(o.rootTensor, void()) {
    TORCH_CHECK(o.rootTensor == 0, where(), ": rootTensor must be 0");
  }
  template <typename O>
  void checkRootTensor(const O&, long) {}

  at::Tensor stage(const at::Tensor& t, bool read, bool write);
  // Makes the calls in order, collecting their work handles into w; the first that fails stops
  // them and leaves its message (located by b->where(name)) in w.submitError_.
  static void submit(
      const std::vector<std::function<int(uint64_t*)>>& calls, MooncakeWork& w,
      MooncakeBackend* b, const char* name);
  c10::intrusive_ptr<c10d::Work> launchCpu(const c10::intrusive_ptr<MooncakeWork>& w);
  c10::intrusive_ptr<c10d::Work> launchCuda(const c10::intrusive_ptr<MooncakeWork>& w);

  MooncakeBackend* b_;
  uint64_t pg_;
  bool sync_ = false;
  c10d::OpType type_;
  const char* name_;
  bool deviceSet_ = false;
  c10::Device device_{at::kCPU};
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> post_;
  std::vector<std::pair<at::Tensor, at::Tensor>> h2d_;
  std::vector<std::function<int(uint64_t*)>> calls_;
};

} // namespace mooncake
