// The point-to-point overrides of c10d::Backend (send, recv, recvAnysource). A peer may be any
// slot up to max_group_size (a rank that joins later), never this rank.
#include "op.hpp"

namespace mooncake {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

WorkPtr MooncakeBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  Op op(this, c10d::OpType::SEND);
  at::Tensor& t = op.p2p(tensors, dstRank, /*send=*/true);
  op.send(op.in(t), dstRank, tag);
  return op.launch(tensors);
}

WorkPtr MooncakeBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  Op op(this, c10d::OpType::RECV);
  at::Tensor& t = op.p2p(tensors, srcRank, /*send=*/false);
  op.recv(op.out(t), srcRank, tag);
  return op.launch(tensors);
}

WorkPtr MooncakeBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Op op(this, c10d::OpType::RECVANYSOURCE);
  at::Tensor& t = op.single(tensors, "output", "tensor");
  op.recv(op.out(t), /*src=*/-1, tag);
  return op.launch(tensors);
}

} // namespace mooncake
