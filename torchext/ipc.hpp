// The same-host device path (docs/cuda.md, "Same-host device path"): the ranks of a group on one
// host read each other's op buffers directly instead of staging them through host memory and
// libmooncake's transport. libmooncake carries only the control: one small all-gather per op
// (each rank's buffer handle; it also says the buffer is filled), and for all_reduce a barrier
// between its reduce-scatter and all-gather halves.
//
// The seam is PeerMemory: how a rank shows its buffer to peers and maps theirs. Two kinds:
//   CudaPeerMemory (ipc_cuda.cpp)  CUDA IPC handles of device memory (built with CUDA only)
//   ShmPeerMemory  (ipc_fake.cpp)  POSIX shared memory standing in for device memory, handles =
//                                  shm names; MOONCAKE_PG_IPC_FAKE=1 runs the path on CPU tensors
//                                  so the protocol is tested with real processes without a GPU.
// IpcPath (ipc_path.cpp) owns the protocol and the decision to use it; the collective overrides
// call MooncakeBackend::Op::viaIpc, which returns nullptr when the op stays on staging.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace mooncake {

class MooncakeBackend;
class MooncakeWork;

// What one rank tells the others about its buffer (exchanged with mc_pg_allgather; fixed size).
struct IpcBlob {
  uint32_t magic = 0;
  uint32_t flags = 0;     // handshake: kUsable; op: kExposed
  uint64_t host = 0;      // handshake: the host's identity (hostname and boot id)
  int64_t offset = 0;     // the buffer's offset in the mapped allocation
  int64_t nbytes = 0;     // the buffer's size
  char handle[96] = {};   // CUipcMemHandle (64 bytes) or a shm name
  static constexpr uint32_t kMagic = 0x4d435049;  // "MCPI"
  static constexpr uint32_t kUsable = 1;
  static constexpr uint32_t kExposed = 2;
};
static_assert(sizeof(IpcBlob) == 128, "IpcBlob is exchanged as 128 bytes");

// The seam: one process's exportable scratch buffer and its mappings of the peers' ones.
// Each rank copies an op's input into its scratch (the only memory peers map: a user tensor's
// allocation may be freed or reused by its allocator while a peer still maps it); the scratch is
// exported once and mapped by each peer once (the cache).
//
// The scratch has two halves, used by alternate ops: op s writes half s % 2 before its
// all-gather, and peers read it until they enter op s + 1; this rank writes that half again at
// op s + 2, after op s + 1's all-gather, which every peer entered only after finishing op s. So
// no barrier closes an op. The scratch only changes when it must grow: each peer unmaps the old
// one when it sees the new handle (op s), and the owner frees it after op s + 1's all-gather
// (retire), when no peer maps it any more.
class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual const char* kind() const = 0;  // "cuda-ipc" or "shm-fake"
  // Whether this process can export and map buffers (why: the reason when not); called between
  // begin() and end().
  virtual bool usable(std::string* why) = 0;
  // Copies t's data into the scratch (grown when needed) and returns it as a flat tensor of t's
  // dtype; fills blob's handle, offset and nbytes.
  virtual at::Tensor expose(const at::Tensor& t, IpcBlob* blob) = 0;
  // A peer's scratch as a flat tensor of like's dtype, device and size (one cached mapping per
  // peer, replaced when the peer's handle changes).
  virtual at::Tensor open(int peer, const IpcBlob& blob, const at::Tensor& like) = 0;
  // After an op's all-gather: frees scratch buffers that grew out of use before the previous op.
  virtual void retire() = 0;
  // Waits until the device work issued so far is done (host-visible).
  virtual void fence() = 0;
  // Brackets an op's device work on device (the stream it goes on).
  virtual void begin(const c10::Device& device) = 0;
  virtual void end() = 0;

  // Counters for tests and the device check.
  std::atomic<int64_t> exports{0};  // scratch buffers exported (first use and growth)
  std::atomic<int64_t> opens{0};    // peer scratch buffers mapped (cache misses)

 protected:
  // The half of the scratch the next op uses (0 or 1); advances the op count.
  int nextHalf() { return static_cast<int>(seq_++ % 2); }
  // The op count now, recorded with a scratch buffer that grew out of use (before nextHalf()).
  uint64_t seq() const { return seq_; }
  // Whether a buffer superseded at op `gen` may be freed (op gen + 1's all-gather is done).
  bool mayFree(uint64_t gen) const { return gen + 2 <= seq_; }

 private:
  uint64_t seq_ = 0;
};

std::unique_ptr<PeerMemory> makeShmPeerMemory();
// nullptr when the shim was built without CUDA.
std::unique_ptr<PeerMemory> makeCudaPeerMemory();

// A control op of the path completed without some peers (or failed because of them): the group
// has agreed on the failure and its view holds the survivors.
struct IpcPeerFailed : std::runtime_error {
  std::vector<int32_t> failed;  // 1 per group rank that failed
  IpcPeerFailed(const std::string& msg, std::vector<int32_t> f)
      : std::runtime_error(msg), failed(std::move(f)) {}
};

// One collective the path runs. src is the buffer peers read; the results go to dst (the
// whole-group output, or the in-place buffer for allreduce/broadcast) or to dsts (one per rank).
struct IpcJob {
  enum Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll } kind;
  at::Tensor src;
  at::Tensor dst;
  std::vector<at::Tensor> dsts;
  c10d::ReduceOp::RedOpType rop = c10d::ReduceOp::SUM;
  int root = 0;
  // allreduce: the reduction as the C ABI takes it, for a rerun on staging (ReduceArgs).
  int32_t dtype = 0, cop = 0;
  int64_t count = 0;
};

// Decides whether an op takes the path and runs it; one per backend, used by the submit thread.
class IpcPath {
 public:
  // Whether the path may run a reduction rop on t's dtype (the kinds torch ops reduce exactly as
  // the staging path does); deterministic on every rank.
  static bool reducible(const at::Tensor& t, c10d::ReduceOp::RedOpType rop);
  // The memory kind for tensors on device d, or nullptr when the path is off for them (switched
  // off, no CUDA build, not a CUDA tensor without the fake).
  PeerMemory* memoryFor(const c10::Device& d);
  // Handshake state per memory kind: 0 unknown, 1 on, -1 off.
  int state(PeerMemory* m);
  void setState(PeerMemory* m, int s);
  // Runs the handshake (on the submit thread): every rank on one host and able to map memory.
  void handshake(MooncakeBackend& b, PeerMemory* m, const c10::Device& device);
  // Runs one op (on the submit thread). Throws with the reason on failure (IpcPeerFailed when
  // a peer failed; wrote() then says whether the op's outputs were written).
  void run(MooncakeBackend& b, PeerMemory* m, const IpcJob& job);
  bool wrote() const { return wrote_; }
  // After a peer failed before the outputs were written: runs all_reduce or broadcast again on
  // the group over the survivors, through host memory (the work waits for the handle it adds
  // to w). False for the other kinds.
  bool rerun(MooncakeBackend& b, PeerMemory* m, const IpcJob& job, MooncakeWork& w);
  // After a failure no later op takes the path (the group's view changed).
  void disable() { off_ = true; }
  bool disabled() const { return off_; }

  std::atomic<int64_t> ops{0};  // ops run on the path
  // ops, the handshake state and each memory kind's counters ("<kind>.exports", ...).
  std::map<std::string, int64_t> stats();

 private:
  // An all-gather of blobs through libmooncake; throws on error or a failed peer.
  std::vector<IpcBlob> exchange(MooncakeBackend& b, const IpcBlob& mine, const char* what);
  void barrier(MooncakeBackend& b, const char* what);

  std::mutex mu_;
  bool off_ = false;
  bool wrote_ = false;  // the current op wrote its outputs (submit thread only)
  std::unique_ptr<PeerMemory> cuda_, shm_;
  bool cudaMade_ = false, shmMade_ = false;
  std::map<PeerMemory*, int> state_;
};

} // namespace mooncake
