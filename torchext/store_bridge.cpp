// The c10d store the backend's creator received, as the mc_store_ops callbacks libmooncake uses
// for rendezvous and for admitting later joiners. The callbacks run on Go threads: they never
// throw (errors become return codes) and never block on a TCPStore client lock for long.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mooncake_backend.hpp"
#include "util.hpp"

namespace mooncake {

namespace {

int storeSet(void* ctx, const char* key, const uint8_t* val, size_t len) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    b->store->set(std::string(key), std::vector<uint8_t>(val, val + len));
    return 0;
  } catch (...) {
    return -3;
  }
}

int storeCheck(void* ctx, const char* key) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    return b->store->check({std::string(key)}) ? 1 : 0;
  } catch (...) {
    return -3;
  }
}

// Polls with check() instead of Store::wait so a long wait never holds a client connection's
// lock (TCPStore serialises operations per client) while other Go threads need the store.
int storeGet(void* ctx, const char* key, int64_t timeoutMs, uint8_t** val, size_t* len) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    std::string k(key);
    auto deadline = Clock::now() +
        (timeoutMs < 0 ? b->store->getTimeout()
                       : std::chrono::milliseconds(timeoutMs));
    auto sleep = std::chrono::microseconds(200);
    while (!b->store->check({k})) {
      if (Clock::now() >= deadline) {
        return -1;
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
    }
    std::vector<uint8_t> v = b->store->get(k);
    uint8_t* out = static_cast<uint8_t*>(std::malloc(v.empty() ? 1 : v.size()));
    if (!out) {
      return -3;
    }
    if (!v.empty()) {
      std::memcpy(out, v.data(), v.size());
    }
    *val = out;
    *len = v.size();
    return 0;
  } catch (const c10::DistStoreError&) {
    return -1;
  } catch (...) {
    return -3;
  }
}

int storeAdd(void* ctx, const char* key, int64_t delta, int64_t* out) {
  try {
    auto* b = static_cast<StoreBridge*>(ctx);
    int64_t v = b->store->add(std::string(key), delta);
    if (out) {
      *out = v;
    }
    return 0;
  } catch (...) {
    return -3;
  }
}

} // namespace

StoreBridge::StoreBridge(c10::intrusive_ptr<c10d::Store> s) : store(std::move(s)) {
  ops.ctx = this;
  ops.set = &storeSet;
  ops.get = &storeGet;
  ops.check = &storeCheck;
  ops.add = &storeAdd;
}

} // namespace mooncake
