// The types of upstream Mooncake's C++ API that the seam's three methods take and return, laid
// out as upstream's (kvcache-ai/Mooncake at 3b5a594: common/base/status.h, transport/transport.h,
// control_plane/link_manager.h), declared here so that a library compiled against upstream's
// headers calls these definitions, and these call it, with the same memory layout and the same
// calling convention. Only what the ABI needs is declared:
//   - Status: a 2-byte code and an owned C string (nullptr when OK), with a user-provided copy
//     constructor and destructor, so it is returned through a hidden pointer; the destructor
//     frees the message with delete[], as upstream's does, so either side may destroy it.
//   - Transport::TransferRequest: opcode (an int-sized enum), source, target_id (the segment),
//     target_offset, length, advise_retry_cnt, transport_hint, task_group_id: 56 bytes.
//   - Transport::TransferStatus: the status enum (int-sized; COMPLETED = 4, FAILED = 6) and the
//     bytes transferred.
//   - LinkManager::resolvePeer returns std::optional<uint64_t> (16 bytes, in two registers).
// The classes' data members are this library's own: only their addresses cross the boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace mooncake {

class Status final {
   public:
    enum class Code : uint16_t { kOk = 0, kInvalidArgument = 1 };

    Status() = default;
    Status(Code code, std::string_view message);
    Status(const Status& other);
    Status& operator=(const Status& other) = delete;
    ~Status() { delete[] message_; }

    bool ok() const { return code_ == Code::kOk; }
    const char* message() const { return message_ ? message_ : ""; }

   private:
    Code code_ = Code::kOk;
    const char* message_ = nullptr;
};

struct Transport {
    using SegmentID = uint64_t;
    using BatchID = uint64_t;

    struct TransferRequest {
        enum OpCode { READ, WRITE };
        OpCode opcode;
        void* source;
        SegmentID target_id;
        uint64_t target_offset;
        size_t length;
        int advise_retry_cnt = 0;
        int transport_hint = 0;
        uint64_t task_group_id = 0;
    };

    enum TransferStatusEnum { WAITING, PENDING, INVALID, CANCELED, COMPLETED, TIMEOUT, FAILED };

    struct TransferStatus {
        TransferStatusEnum s;
        size_t transferred_bytes;
    };
};

using SegmentID = Transport::SegmentID;
using BatchID = Transport::BatchID;
using GlobalRank = int32_t;

static_assert(sizeof(Status) == 16);
static_assert(sizeof(Transport::TransferRequest) == 56);
static_assert(offsetof(Transport::TransferRequest, target_id) == 16);
static_assert(offsetof(Transport::TransferRequest, length) == 32);
static_assert(sizeof(Transport::TransferStatus) == 16);
static_assert(Transport::COMPLETED == 4 && Transport::FAILED == 6);

// The seam's transfer engine: batches of tasks whose status getTransferStatus reports. The data
// itself moves in libmooncake before the check; a submitted task is COMPLETED.
class TransferEngine {
   public:
    Status submitTransfer(BatchID batch_id, const std::vector<Transport::TransferRequest>& entries);
    Status getTransferStatus(BatchID batch_id, size_t task_id, Transport::TransferStatus& status);

    BatchID allocateBatch();
    void freeBatch(BatchID batch_id);

   private:
    std::mutex mu_;
    std::map<BatchID, std::vector<Transport::TransferStatus>> batches_;
    std::vector<BatchID> free_;
    BatchID next_ = 1;
};

// The seam's link manager: rank -> segment of the group's slots.
class LinkManager {
   public:
    explicit LinkManager(int32_t max_group_size);
    std::optional<SegmentID> resolvePeer(GlobalRank peer) const;

   private:
    std::vector<SegmentID> segments_;
};

}  // namespace mooncake
