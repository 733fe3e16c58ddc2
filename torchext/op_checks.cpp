// MooncakeBackend::Op's argument checks: one helper per rule the op overrides share. Every
// message starts with where() ("mooncake-cpu allgather (rank 0 of 4)"); tests match some of them.
#include <c10/util/Exception.h>

#include <algorithm>

#include "op.hpp"
#include "util.hpp"

namespace mooncake {

namespace {

// dtype codes the reduction kernels accept (c10::ScalarType values).
bool reducibleDtype(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kHalf: case at::kFloat: case at::kDouble: case at::kBool: case at::kBFloat16:
      return true;
    default:
      return false;
  }
}

} // namespace

void MooncakeBackend::Op::check(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), where(), ": ", what, " is an undefined tensor");
  TORCH_CHECK(
      !t.is_sparse(), where(), ": sparse tensors are not supported (", what, " is ",
      t.layout(), ")");
  TORCH_CHECK(
      t.layout() == at::kStrided, where(), ": only strided tensors are supported (", what,
      " has layout ", t.layout(), ")");
  const auto dev = t.device();
  if (b_->cuda_) {
    TORCH_CHECK(
        dev.is_cuda() || dev.is_cpu(), where(), ": ", what, " is on ", dev,
        "; backend 'mooncake' takes CUDA (or CPU) tensors");
  } else {
    TORCH_CHECK(
        dev.is_cpu(), where(), ": ", what, " is on ", dev,
        "; backend 'mooncake-cpu' takes CPU tensors (use backend 'mooncake' for CUDA)");
  }
  if (!deviceSet_) {
    device_ = dev;
    deviceSet_ = true;
  } else {
    TORCH_CHECK(
        device_ == dev, where(), ": all tensors must be on one device, found ", device_,
        " and ", dev);
  }
}

at::Tensor& MooncakeBackend::Op::single(
    std::vector<at::Tensor>& ts, const char* what, const char* as) {
  TORCH_CHECK(
      ts.size() == 1, where(), ": expects exactly one ", what, " tensor, got ", ts.size());
  if (as != nullptr) {
    check(ts[0], as);
  }
  return ts[0];
}

void MooncakeBackend::Op::checkRank(int64_t r, int size, const char* what) {
  TORCH_CHECK(
      r >= 0 && r < size, where(), ": invalid ", what, " rank ", r, " (group size ", size, ")");
}

at::Tensor& MooncakeBackend::Op::p2p(std::vector<at::Tensor>& tensors, int peer, bool send) {
  at::Tensor& t = single(tensors, send ? "input" : "output", "tensor");
  checkRank(peer, std::max(b_->curSize_, b_->maxGroupSize_), send ? "destination" : "source");
  TORCH_CHECK(
      peer != b_->rank_, where(),
      send ? ": a rank cannot send to itself" : ": a rank cannot receive from itself");
  return t;
}

void MooncakeBackend::Op::sameType(
    const at::Tensor& a, const at::Tensor& b, const char* aName, const char* bName) {
  TORCH_CHECK(
      a.scalar_type() == b.scalar_type(), where(), ": dtype mismatch between ", aName, " (",
      a.scalar_type(), ") and ", bName, " (", b.scalar_type(), ")");
}

void MooncakeBackend::Op::oneList(size_t n, bool root, bool output) {
  TORCH_CHECK(
      n == 1, where(), ": ", root ? "root expects" : "expects", " one ",
      output ? "output" : "input", " tensor list, got ", n);
}

void MooncakeBackend::Op::groupList(size_t n, const char* what) {
  if (static_cast<int>(n) == size()) {
    return;
  }
  const int active = b_->activeCount();
  // Fewer than this rank's active ranks: its peers may have met failures it has not; the op
  // probes the group and lays the list out by the agreed view when it runs (pg, peerfault.go).
  TORCH_CHECK(
      (n >= 1 && static_cast<int>(n) <= active), where(), ": ", what, " has ", n,
      " tensors, expected the group size ", size(), " or one per active rank (up to ", active,
      ")");
}

int MooncakeBackend::Op::parts(const at::Tensor& whole, const at::Tensor& part) {
  const int64_t p = part.numel();
  return p == 0 || whole.numel() == p * size() ? size() : static_cast<int>(whole.numel() / p);
}

void MooncakeBackend::Op::peerList(
    const std::vector<at::Tensor>& list, const at::Tensor& one, bool listIsOutput) {
  const char* mine = listIsOutput ? "output" : "input";
  const char* other = listIsOutput ? "input" : "output";
  groupList(list.size(), listIsOutput ? "output tensor list" : "input tensor list");
  for (auto& t : list) {
    check(t, mine);
    sameType(listIsOutput ? t : one, listIsOutput ? one : t, "output", "input");
    TORCH_CHECK(
        t.numel() == one.numel(), where(), ": ", mine, " tensor has ", t.numel(),
        " elements, ", other, " has ", one.numel());
  }
}

std::vector<at::Tensor>& MooncakeBackend::Op::perRank(
    std::vector<at::Tensor>& mine, std::vector<std::vector<at::Tensor>>& lists,
    bool listIsOutput) {
  const char* mineName = listIsOutput ? "input" : "output";
  at::Tensor& t = single(mine, mineName);
  oneList(lists.size(), /*root=*/false, listIsOutput);
  check(t, mineName);
  peerList(lists[0], t, listIsOutput);
  return lists[0];
}

std::vector<at::Tensor> MooncakeBackend::Op::rooted(
    std::vector<at::Tensor>& mine, std::vector<std::vector<at::Tensor>>& lists,
    int64_t rootRank, bool listIsOutput) {
  const char* mineName = listIsOutput ? "input" : "output";
  at::Tensor& t = single(mine, mineName);
  checkRank(rootRank, size(), "root");
  check(t, mineName);
  if (b_->rank_ != rootRank) {
    TORCH_CHECK(
        lists.empty() || (lists.size() == 1 && lists[0].empty()), where(),
        ": non-root ranks must pass an empty ", listIsOutput ? "output" : "input", " list");
    return {};
  }
  oneList(lists.size(), /*root=*/true, listIsOutput);
  peerList(lists[0], t, listIsOutput);
  return lists[0];
}

void MooncakeBackend::Op::pairs(
    const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(
      outputs.size() == inputs.size(), where(), ": got ", outputs.size(), " outputs for ",
      inputs.size(), " inputs");
}

void MooncakeBackend::Op::wholeGroup(
    const at::Tensor& out, const at::Tensor& in, bool outIsWhole, int index) {
  check(in, "input");
  check(out, "output");
  sameType(out, in, "output", "input");
  const at::Tensor& whole = outIsWhole ? out : in;
  const at::Tensor& part = outIsWhole ? in : out;
  if (whole.numel() == part.numel() * size()) {
    return;
  }
  // Sized by the active ranks (upstream's layout after a failure), or by fewer: this rank's
  // peers may have met failures it has not; the op probes the group and lays the buffer out by
  // the agreed view when it runs (pg, peerfault.go).
  const int active = b_->activeCount();
  const int64_t p = part.numel();
  TORCH_CHECK(
      p > 0 && whole.numel() % p == 0 && whole.numel() / p >= 1 && whole.numel() / p <= active,
      where(), ": ",
      outIsWhole ? "output" : "input", " ", index < 0 ? std::string("tensor") : std::to_string(index),
      " must have group size (", size(), ") x ", outIsWhole ? "input" : "output",
      " elements (", part.numel(), "), got ", whole.numel(),
      " (or up to the active ranks (", active, ") x that, laid out by the active ranks)");
}

ReduceArgs MooncakeBackend::Op::reduction(const at::Tensor& t, const c10d::ReduceOp& rop) {
  int32_t op = static_cast<int32_t>(rop.op_);
  TORCH_CHECK(
      rop.op_ != c10d::ReduceOp::PREMUL_SUM && rop.op_ <= c10d::ReduceOp::BXOR, where(),
      ": reduce op ", static_cast<int>(rop.op_), " is not supported (SUM, AVG, PRODUCT, MIN, "
      "MAX, BAND, BOR, BXOR are)");
  at::ScalarType st = t.scalar_type();
  int64_t count = t.numel();
  if (at::isComplexType(st)) {
    TORCH_CHECK(
        rop.op_ == c10d::ReduceOp::SUM || rop.op_ == c10d::ReduceOp::AVG, where(),
        ": complex tensors support only SUM and AVG");
    st = c10::toRealValueType(st);
    count *= 2;
  }
  TORCH_CHECK(
      reducibleDtype(st), where(), ": dtype ", t.scalar_type(),
      " is not supported for reductions");
  bool isInt = at::isIntegralType(st, /*includeBool=*/true);
  TORCH_CHECK(
      isInt ||
          !(rop.op_ == c10d::ReduceOp::BAND || rop.op_ == c10d::ReduceOp::BOR ||
            rop.op_ == c10d::ReduceOp::BXOR),
      where(), ": bitwise reductions need an integer or bool dtype, got ", t.scalar_type());
  return {static_cast<int32_t>(st), op, count};
}

// Splits are in rows of dim 0; an empty split list means equal splits.
std::vector<int64_t> MooncakeBackend::Op::splitBytes(
    const at::Tensor& t, const std::vector<int64_t>& s, const char* what) {
  const int n = size();
  std::vector<int64_t> bytes(n);
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowBytes = rows == 0 ? 0 : nbytesOf(t) / rows;
  if (s.empty()) {
    TORCH_CHECK(
        rows % n == 0, where(), ": ", what, " dim 0 (", rows,
        ") is not divisible by the group size ", n);
    std::fill(bytes.begin(), bytes.end(), rows / n * rowBytes);
    return bytes;
  }
  TORCH_CHECK(
      static_cast<int>(s.size()) == n, where(), ": ", what, " split sizes have ", s.size(),
      " entries, expected the group size ", n);
  int64_t sum = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    TORCH_CHECK(s[i] >= 0, where(), ": negative ", what, " split size ", s[i]);
    sum += s[i];
    bytes[i] = s[i] * rowBytes;
  }
  TORCH_CHECK(
      sum == rows, where(), ": ", what, " split sizes sum to ", sum, " but dim 0 is ", rows);
  return bytes;
}

} // namespace mooncake
