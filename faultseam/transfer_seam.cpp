// The seam's definitions of upstream's three methods (upstream_abi.hpp). They are exported with
// default visibility and called only through the PLT (seam_check.cpp), so an LD_PRELOADed
// definition runs instead, and finds these with dlsym(RTLD_NEXT) or
// dlopen("libmooncake_pg.so", RTLD_NOLOAD).
#include <cstring>

#include "upstream_abi.hpp"

namespace mooncake {

Status::Status(Code code, std::string_view message) : code_(code) {
    if (code == Code::kOk) return;
    char* copy = new char[message.size() + 1];
    std::memcpy(copy, message.data(), message.size());
    copy[message.size()] = '\0';
    message_ = copy;
}

Status::Status(const Status& other) : code_(other.code_) {
    if (other.message_ == nullptr) return;
    size_t n = std::strlen(other.message_);
    char* copy = new char[n + 1];
    std::memcpy(copy, other.message_, n + 1);
    message_ = copy;
}

Status TransferEngine::submitTransfer(BatchID batch_id,
                                      const std::vector<Transport::TransferRequest>& entries) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = batches_.find(batch_id);
    if (it == batches_.end()) {
        return Status(Status::Code::kInvalidArgument, "submitTransfer: unknown batch id");
    }
    for (const auto& e : entries) {
        it->second.push_back(Transport::TransferStatus{Transport::COMPLETED, e.length});
    }
    return Status();
}

Status TransferEngine::getTransferStatus(BatchID batch_id, size_t task_id,
                                         Transport::TransferStatus& status) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = batches_.find(batch_id);
    if (it == batches_.end() || task_id >= it->second.size()) {
        status = Transport::TransferStatus{Transport::INVALID, 0};
        return Status(Status::Code::kInvalidArgument, "getTransferStatus: unknown batch or task");
    }
    status = it->second[task_id];
    return Status();
}

BatchID TransferEngine::allocateBatch() {
    std::lock_guard<std::mutex> lock(mu_);
    BatchID id;
    if (!free_.empty()) {
        id = free_.back();  // reused, as upstream's batch ids are: a preload's maps stay small
        free_.pop_back();
    } else {
        id = next_++;
    }
    batches_[id].clear();
    return id;
}

void TransferEngine::freeBatch(BatchID batch_id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (batches_.erase(batch_id) > 0) free_.push_back(batch_id);
}

LinkManager::LinkManager(int32_t max_group_size) {
    // A segment id per slot, unique in the process: the object's address times 2048 (above the
    // largest group, 1024 slots) plus the rank.
    uint64_t base = reinterpret_cast<uintptr_t>(this) << 11;
    for (int32_t r = 0; r < max_group_size; ++r) segments_.push_back(base | uint64_t(r));
}

std::optional<SegmentID> LinkManager::resolvePeer(GlobalRank peer) const {
    if (peer < 0 || size_t(peer) >= segments_.size()) return std::nullopt;
    return segments_[size_t(peer)];
}

}  // namespace mooncake
