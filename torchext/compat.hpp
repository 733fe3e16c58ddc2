// Differences between the torch versions the shim builds against (torch >= 2.5). Each is
// detected from the headers themselves (the enum member or the field's type), not from a version
// number, so a torch that back- or forward-ports one needs no change here.
#pragma once

#include <type_traits>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace mooncake::compat {

// OpType::ALLGATHER_INTO_TENSOR_COALESCED and REDUCE_SCATTER_TENSOR_COALESCED came after the
// backend methods that use them (torch 2.11 has the methods but not the enum values); where they
// are missing, works of those ops carry OpType::COALESCED.
template <class E, class = void>
struct TensorCoalescedOps {
  static constexpr bool kHas = false;
  static constexpr E allgather = E::COALESCED;
  static constexpr E reduceScatter = E::COALESCED;
};

template <class E>
struct TensorCoalescedOps<
    E,
    std::void_t<decltype(E::ALLGATHER_INTO_TENSOR_COALESCED),
                decltype(E::REDUCE_SCATTER_TENSOR_COALESCED)>> {
  static constexpr bool kHas = true;
  static constexpr E allgather = E::ALLGATHER_INTO_TENSOR_COALESCED;
  static constexpr E reduceScatter = E::REDUCE_SCATTER_TENSOR_COALESCED;
};

using TensorCoalesced = TensorCoalescedOps<c10d::OpType>;

// c10d::Backend::size_ is `const int` in some versions and `int` in others. Where it is
// writable the backend keeps it equal to the group's current size (Backend::getSize()); where it
// is const it stays the size the group was created with, and the shim uses its own copy.
template <class T>
void setIfWritable(T& field, int value) {
  if constexpr (!std::is_const_v<T>) {
    field = value;
  }
}

} // namespace mooncake::compat
