// ShmPeerMemory: the host-memory stand-in for CUDA IPC (MOONCAKE_PG_IPC_FAKE=1, CPU tensors on
// backend "mooncake"). A rank's scratch is a POSIX shared-memory segment (the "device memory"
// peers map) of two halves, its handle the segment's name; a half grows by doubling from 4 KiB
// (a new segment and name: names are never reused). Peers map each rank's segment once and replace the mapping when the name changes.
// Segments are unlinked when they retire or the backend goes (a killed process leaves its
// segment in /dev/shm, named mcpg-ipcfake-<pid>-<n>).
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "ipc.hpp"

namespace mooncake {

namespace {

struct Segment {
  std::string name;
  void* base = nullptr;
  size_t size = 0;
};

class ShmPeerMemory : public PeerMemory {
 public:
  ~ShmPeerMemory() override {
    drop(scratch_, /*unlink=*/true);
    for (auto& [s, gen] : old_) {
      drop(s, true);
    }
    for (auto& [k, s] : peers_) {
      drop(s, false);
    }
  }
  const char* kind() const override { return "shm-fake"; }
  bool usable(std::string* why) override {
    Segment s;
    if (!create(8, &s, why)) {
      return false;
    }
    drop(s, true);
    return true;
  }

  at::Tensor expose(const at::Tensor& t, IpcBlob* blob) override {
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    if (half_ < n) {
      size_t h = std::max({n, 2 * half_, size_t(4096)});
      Segment s;
      std::string err;
      TORCH_CHECK(create(2 * h, &s, &err), "shm-fake: ", err);
      if (scratch_.base) {
        old_.emplace_back(scratch_, seq());
      }
      scratch_ = s;
      half_ = h;
      ++exports;
    }
    size_t off = static_cast<size_t>(nextHalf()) * half_;
    at::Tensor x = at::from_blob(static_cast<uint8_t*>(scratch_.base) + off, {t.numel()}, t.options());
    x.copy_(t.reshape({-1}));
    std::snprintf(blob->handle, sizeof(blob->handle), "%s", scratch_.name.c_str());
    blob->offset = static_cast<int64_t>(off);
    blob->nbytes = static_cast<int64_t>(n);
    return x;
  }

  at::Tensor open(int peer, const IpcBlob& blob, const at::Tensor& like) override {
    std::string name(blob.handle, strnlen(blob.handle, sizeof(blob.handle)));
    Segment& s = peers_[peer];
    if (s.name != name) {
      drop(s, false);  // the peer grew its scratch: its old one goes after this op
      s.name = name;
      int fd = shm_open(name.c_str(), O_RDWR, 0);
      TORCH_CHECK(fd >= 0, "shm-fake: opening rank ", peer, "'s segment ", name, ": ",
                  std::strerror(errno));
      struct stat st {};
      fstat(fd, &st);
      s.size = static_cast<size_t>(st.st_size);
      s.base = mmap(nullptr, s.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      int e = errno;
      close(fd);
      if (s.base == MAP_FAILED) {
        s.base = nullptr;
        s.name.clear();
        TORCH_CHECK(false, "shm-fake: mapping ", name, ": ", std::strerror(e));
      }
      ++opens;
    }
    TORCH_CHECK(
        blob.offset >= 0 && static_cast<size_t>(blob.offset + blob.nbytes) <= s.size,
        "shm-fake: rank ", peer, "'s buffer lies outside its segment");
    auto* p = static_cast<uint8_t*>(s.base) + blob.offset;
    return at::from_blob(p, {like.numel()}, like.options());
  }

  void retire() override {
    for (auto it = old_.begin(); it != old_.end();) {
      if (mayFree(it->second)) {
        drop(it->first, true);
        it = old_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void fence() override {}
  void begin(const c10::Device&) override {}
  void end() override {}

 private:
  bool create(size_t n, Segment* s, std::string* err) {
    s->name = "/mcpg-ipcfake-" + std::to_string(getpid()) + "-" + std::to_string(next_++);
    s->size = std::max<size_t>(n, 4096);
    int fd = shm_open(s->name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      *err = "shm_open " + s->name + ": " + std::strerror(errno);
      return false;
    }
    if (ftruncate(fd, static_cast<off_t>(s->size)) != 0) {
      *err = "ftruncate " + s->name + ": " + std::strerror(errno);
      close(fd);
      shm_unlink(s->name.c_str());
      return false;
    }
    s->base = mmap(nullptr, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (s->base == MAP_FAILED) {
      s->base = nullptr;
      *err = "mmap " + s->name + ": " + std::strerror(e);
      shm_unlink(s->name.c_str());
      return false;
    }
    return true;
  }

  static void drop(Segment& s, bool unlink) {
    if (s.base) {
      munmap(s.base, s.size);
    }
    s.base = nullptr;
    if (unlink && !s.name.empty()) {
      shm_unlink(s.name.c_str());
    }
  }

  uint64_t next_ = 0;
  Segment scratch_;
  size_t half_ = 0;  // bytes per half of scratch_
  std::vector<std::pair<Segment, uint64_t>> old_;  // grown out of use, at op count
  std::map<int, Segment> peers_;
};

} // namespace

std::unique_ptr<PeerMemory> makeShmPeerMemory() {
  return std::make_unique<ShmPeerMemory>();
}

} // namespace mooncake
