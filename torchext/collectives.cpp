// The collective overrides of c10d::Backend: each checks its arguments, stages its tensors and
// adds its mc_pg_* calls through an Op, then launches the work (op.hpp has the helpers).
#include <c10/util/Exception.h>

#include "op.hpp"
#include "util.hpp"

namespace mooncake {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

WorkPtr MooncakeBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  Op op(this, c10d::OpType::BROADCAST, opts);
  at::Tensor& t = op.single(tensors, "input", "tensor");
  int32_t root = op.root(opts);
  if (auto w = op.viaIpc({IpcJob::kBroadcast, t, {}, {}, c10d::ReduceOp::SUM, root}, tensors)) {
    return w;
  }
  op.broadcast(op.inout(t), root);
  return op.launch(tensors);
}

WorkPtr MooncakeBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  Op op(this, c10d::OpType::ALLREDUCE, opts);
  at::Tensor& t = op.single(tensors, "input", "tensor");
  ReduceArgs ra = op.reduction(t, opts.reduceOp);
  if (IpcPath::reducible(t, opts.reduceOp.op_)) {
    IpcJob job{IpcJob::kAllReduce, t, {}, {}, opts.reduceOp.op_};
    job.dtype = ra.dtype;
    job.cop = ra.op;
    job.count = ra.count;
    if (auto w = op.viaIpc(std::move(job), tensors)) {
      return w;
    }
  }
  op.allreduce(op.inout(t), ra);
  return op.launch(tensors);
}

WorkPtr MooncakeBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Op op(this, c10d::OpType::ALLREDUCE_COALESCED, opts);
  TORCH_CHECK(!tensors.empty(), op.where(), ": expects at least one tensor");
  std::vector<ReduceArgs> args;
  for (auto& t : tensors) {
    op.check(t, "tensor");
    args.push_back(op.reduction(t, opts.reduceOp));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    op.allreduce(op.inout(tensors[i]), args[i]);
  }
  return op.launch(tensors);
}

WorkPtr MooncakeBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  Op op(this, c10d::OpType::REDUCE, opts);
  at::Tensor& t = op.single(tensors, "input", "tensor");
  int32_t root = op.root(opts);
  ReduceArgs ra = op.reduction(t, opts.reduceOp);
  op.reduce(op.inout(t), ra, root);
  return op.launch(tensors);
}

WorkPtr MooncakeBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::ALLGATHER, opts);
  auto& outs = op.perRank(inputTensors, outputTensors, /*listIsOutput=*/true);
  if (static_cast<int>(outs.size()) == curSize_) {
    if (auto w = op.viaIpc({IpcJob::kAllGather, inputTensors[0], {}, outs}, outs)) {
      return w;
    }
  }
  at::Tensor sin = op.in(inputTensors[0]);
  op.allgather(sin, op.outs(outs));
  return op.launch(outs);
}

WorkPtr MooncakeBackend::_allgather_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::_ALLGATHER_BASE, opts);
  op.wholeGroup(outputBuffer, inputBuffer, /*outIsWhole=*/true);
  if (outputBuffer.numel() == inputBuffer.numel() * curSize_) {
    if (auto w = op.viaIpc({IpcJob::kAllGather, inputBuffer, outputBuffer}, {outputBuffer})) {
      return w;
    }
  }
  op.allgatherInto(outputBuffer, inputBuffer);
  return op.launch({outputBuffer});
}

// outputTensorLists[r][i] receives inputTensors[i] of rank r (gloo's layout).
WorkPtr MooncakeBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  Op op(this, c10d::OpType::ALLGATHER_COALESCED, opts);
  TORCH_CHECK(
      static_cast<int>(outputTensorLists.size()) == curSize_, op.where(), ": got ",
      outputTensorLists.size(), " output lists, expected the group size ", curSize_);
  std::vector<at::Tensor> flat;
  for (int r = 0; r < curSize_; ++r) {
    TORCH_CHECK(
        outputTensorLists[r].size() == inputTensors.size(), op.where(), ": output list ", r,
        " has ", outputTensorLists[r].size(), " tensors, expected one per input (",
        inputTensors.size(), ")");
    for (size_t i = 0; i < inputTensors.size(); ++i) {
      auto& o = outputTensorLists[r][i];
      op.check(o, "output");
      op.sameType(o, inputTensors[i], "output", "input");
      TORCH_CHECK(
          o.numel() == inputTensors[i].numel(), op.where(), ": output tensor [", r, "][", i,
          "] has ", o.numel(), " elements, input ", i, " has ", inputTensors[i].numel());
      flat.push_back(o);
    }
  }
  for (auto& in : inputTensors) {
    op.check(in, "input");
  }
  for (size_t i = 0; i < inputTensors.size(); ++i) {
    at::Tensor sin = op.in(inputTensors[i]);
    auto ptrs = std::make_shared<std::vector<void*>>();
    for (int r = 0; r < curSize_; ++r) {
      ptrs->push_back(ptrOf(op.out(outputTensorLists[r][i])));
    }
    op.allgather(sin, ptrs);
  }
  return op.launch(flat);
}

#if MOONCAKE_TORCH_AT_LEAST(2, 1)
WorkPtr MooncakeBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Op op(this, compat::TensorCoalesced::allgather, opts);
  op.setName("allgather_into_tensor_coalesced");
  op.pairs(outputs, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    op.wholeGroup(outputs[i], inputs[i], /*outIsWhole=*/true, static_cast<int>(i));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    op.allgatherInto(outputs[i], inputs[i]);
  }
  return op.launch(outputs);
}
#endif

WorkPtr MooncakeBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  Op op(this, c10d::OpType::GATHER, opts);
  auto outs = op.rooted(inputTensors, outputTensors, opts.rootRank, /*listIsOutput=*/true);
  at::Tensor sin = op.in(inputTensors[0]);
  op.gather(sin, op.outs(outs), static_cast<int32_t>(opts.rootRank));
  return op.launch(outs);
}

WorkPtr MooncakeBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  Op op(this, c10d::OpType::SCATTER, opts);
  auto ins = op.rooted(outputTensors, inputTensors, opts.rootRank, /*listIsOutput=*/false);
  auto ptrs = op.ins(ins);
  op.scatter(ptrs, op.out(outputTensors[0]), static_cast<int32_t>(opts.rootRank));
  return op.launch(outputTensors);
}

WorkPtr MooncakeBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  Op op(this, c10d::OpType::REDUCE_SCATTER, opts);
  auto& ins = op.perRank(outputTensors, inputTensors, /*listIsOutput=*/false);
  at::Tensor& out = outputTensors[0];
  ReduceArgs ra = op.reduction(out, opts.reduceOp);
  auto ptrs = op.ins(ins);
  op.reduceScatter(ptrs, op.out(out), ra);
  return op.launch(outputTensors);
}

WorkPtr MooncakeBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::ReduceScatterOptions& opts) {
  Op op(this, c10d::OpType::_REDUCE_SCATTER_BASE, opts);
  op.wholeGroup(outputBuffer, inputBuffer, /*outIsWhole=*/false);
  ReduceArgs ra = op.reduction(outputBuffer, opts.reduceOp);
  if (IpcPath::reducible(outputBuffer, opts.reduceOp.op_) &&
      inputBuffer.numel() == outputBuffer.numel() * curSize_) {
    if (auto w = op.viaIpc(
            {IpcJob::kReduceScatter, inputBuffer, outputBuffer, {}, opts.reduceOp.op_},
            {outputBuffer})) {
      return w;
    }
  }
  op.reduceScatterFrom(outputBuffer, inputBuffer, ra);
  return op.launch({outputBuffer});
}

#if MOONCAKE_TORCH_AT_LEAST(2, 1)
WorkPtr MooncakeBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Op op(this, compat::TensorCoalesced::reduceScatter, opts);
  op.setName("reduce_scatter_tensor_coalesced");
  op.pairs(outputs, inputs);
  std::vector<ReduceArgs> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    op.wholeGroup(outputs[i], inputs[i], /*outIsWhole=*/false, static_cast<int>(i));
    args.push_back(op.reduction(outputs[i], opts.reduceOp));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    op.reduceScatterFrom(outputs[i], inputs[i], args[i]);
  }
  return op.launch(outputs);
}
#endif

WorkPtr MooncakeBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  Op op(this, c10d::OpType::ALLTOALL_BASE, opts);
  op.check(inputBuffer, "input");
  op.check(outputBuffer, "output");
  op.sameType(outputBuffer, inputBuffer, "output", "input");
  std::vector<int64_t> inBytes = op.splitBytes(inputBuffer, inputSplitSizes, "input");
  std::vector<int64_t> outBytes = op.splitBytes(outputBuffer, outputSplitSizes, "output");
  // Equal splits only: with uneven ones a rank does not know where its part lies in a peer's
  // input.
  if (inputSplitSizes.empty() && outputSplitSizes.empty() &&
      inputBuffer.numel() == outputBuffer.numel() && inputBuffer.numel() % curSize_ == 0) {
    if (auto w = op.viaIpc({IpcJob::kAllToAll, inputBuffer, outputBuffer}, {outputBuffer})) {
      return w;
    }
  }
  at::Tensor sin = op.in(inputBuffer);
  at::Tensor sout = op.out(outputBuffer);
  auto ins = std::make_shared<std::vector<const void*>>();
  auto outs = std::make_shared<std::vector<void*>>();
  int64_t io = 0, oo = 0;
  for (int r = 0; r < curSize_; ++r) {
    ins->push_back(
        sin.numel() == 0 ? ptrOf(sin) : static_cast<const uint8_t*>(sin.data_ptr()) + io);
    outs->push_back(sout.numel() == 0 ? ptrOf(sout) : static_cast<uint8_t*>(sout.data_ptr()) + oo);
    io += inBytes[r];
    oo += outBytes[r];
  }
  op.alltoall(ins, std::move(inBytes), outs, std::move(outBytes));
  return op.launch({outputBuffer});
}

WorkPtr MooncakeBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  Op op(this, c10d::OpType::ALLTOALL, opts);
  op.groupList(inputTensors.size(), "input tensor list");
  op.groupList(outputTensors.size(), "output tensor list");
  for (int r = 0; r < curSize_; ++r) {
    op.check(inputTensors[r], "input");
    op.check(outputTensors[r], "output");
    op.sameType(outputTensors[r], inputTensors[0], "output", "input");
    op.sameType(inputTensors[r], inputTensors[0], "input", "input");
  }
  auto ins = std::make_shared<std::vector<const void*>>();
  auto outs = std::make_shared<std::vector<void*>>();
  std::vector<int64_t> inBytes, outBytes;
  for (int r = 0; r < curSize_; ++r) {
    at::Tensor si = op.in(inputTensors[r]);
    at::Tensor so = op.out(outputTensors[r]);
    ins->push_back(ptrOf(si));
    inBytes.push_back(nbytesOf(si));
    outs->push_back(ptrOf(so));
    outBytes.push_back(nbytesOf(so));
  }
  op.alltoall(ins, std::move(inBytes), outs, std::move(outBytes));
  return op.launch(outputTensors);
}

WorkPtr MooncakeBackend::barrier(const c10d::BarrierOptions& opts) {
  Op op(this, c10d::OpType::BARRIER, opts);
  op.barrier();
  return op.launch({});
}

} // namespace mooncake
