// The seam's C entry points (mooncake_pg_seam.h). mooncake_pg_seam_check calls the three
// methods of transfer_seam.cpp, a separate translation unit, so the calls go through the PLT
// and a preloaded definition takes them.
#include <dlfcn.h>

#include <cstdio>
#include <new>

#include "mooncake_pg_seam.h"
#include "upstream_abi.hpp"

namespace {

struct Seam {
    explicit Seam(int32_t max_group_size) : links(max_group_size) {}
    mooncake::LinkManager links;
    mooncake::TransferEngine engine;
};

const char* const kSymbols[] = {
    "_ZN8mooncake14TransferEngine14submitTransferEmRKSt6vectorINS_9Transport15TransferRequestESaIS3_EE",
    "_ZN8mooncake14TransferEngine17getTransferStatusEmmRNS_9Transport14TransferStatusE",
    "_ZNK8mooncake11LinkManager11resolvePeerEi",
};

int fail(int32_t n, int32_t* failed, const char* why) {
    std::fprintf(stderr, "mooncake pg transfer seam: %s\n", why);
    for (int32_t i = 0; i < n; ++i) failed[i] = 1;
    return -1;
}

}  // namespace

extern "C" int mooncake_pg_seam_interposed(void) {
    // This library's own definitions, looked up in this object alone.
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&mooncake_pg_seam_interposed), &self) == 0 ||
        self.dli_fname == nullptr) {
        return 0;
    }
    void* handle = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) return 0;
    int interposed = 0;
    for (const char* name : kSymbols) {
        void* own = dlsym(handle, name);
        void* seen = dlsym(RTLD_DEFAULT, name);  // the global scope first: a preload wins
        if (own != nullptr && seen != nullptr && own != seen) interposed = 1;
    }
    dlclose(handle);
    return interposed;
}

extern "C" void* mooncake_pg_seam_open(int32_t max_group_size) {
    if (max_group_size <= 0 || max_group_size > 1024) return nullptr;
    return new (std::nothrow) Seam(max_group_size);
}

extern "C" void mooncake_pg_seam_close(void* seam) { delete static_cast<Seam*>(seam); }

extern "C" int mooncake_pg_seam_check(void* seam, const int32_t* ranks, const uint64_t* lengths,
                                      int32_t n, int32_t* failed) {
    if (n <= 0) return 0;
    if (failed == nullptr) return -1;
    if (seam == nullptr || ranks == nullptr || lengths == nullptr) {
        return fail(n, failed, "check: NULL argument");
    }
    auto* s = static_cast<Seam*>(seam);
    std::vector<mooncake::Transport::TransferRequest> entries;
    entries.reserve(size_t(n));
    for (int32_t i = 0; i < n; ++i) {
        auto segment = s->links.resolvePeer(ranks[i]);
        if (!segment) return fail(n, failed, "check: a rank outside the group's slots");
        mooncake::Transport::TransferRequest req{};
        req.opcode = mooncake::Transport::TransferRequest::WRITE;
        req.source = nullptr;  // the data moved in libmooncake already
        req.target_id = *segment;
        req.target_offset = 0;
        req.length = size_t(lengths[i]);
        entries.push_back(req);
    }
    mooncake::BatchID batch = s->engine.allocateBatch();
    int rc = 0;
    {
        mooncake::Status st = s->engine.submitTransfer(batch, entries);
        if (!st.ok()) {
            std::fprintf(stderr, "mooncake pg transfer seam: submitTransfer: %s\n", st.message());
            rc = fail(n, failed, "check: the batch was not submitted");
        }
    }
    for (int32_t i = 0; rc == 0 && i < n; ++i) {
        mooncake::Transport::TransferStatus status{mooncake::Transport::PENDING, 0};
        mooncake::Status st = s->engine.getTransferStatus(batch, size_t(i), status);
        if (!st.ok()) {
            std::fprintf(stderr, "mooncake pg transfer seam: getTransferStatus: %s\n", st.message());
            rc = fail(n, failed, "check: a task's status could not be read");
            break;
        }
        failed[i] = status.s == mooncake::Transport::COMPLETED ? 0 : 1;
    }
    s->engine.freeBatch(batch);
    return rc;
}
