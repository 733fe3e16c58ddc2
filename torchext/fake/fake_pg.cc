// A test double of libmooncake.so's process-group ABI (capi/include/mooncake_pg.h), for
// developing and testing the torch shim without the Go runtime. Every op moves its bytes through
// the c10d store the group was created with (slow, but simple and deterministic); reductions run
// here in rank order. Not for production: no elasticity, no failure handling beyond errors.
//
// Build: g++ -O2 -std=c++17 -shared -fPIC -I capi/include -I <torch>/include \
//            -o python/mooncake/libmooncake.so torchext/fake/fake_pg.cc
#include "mooncake_pg.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

thread_local std::string g_err;

struct Err : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Work {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool ok = false;
  std::string err;
  int32_t source = -1;
};

struct Group {
  mc_pg_config cfg{};
  std::string name;
  mc_store_ops store{};
  int64_t seq = 0;
  std::map<std::string, int64_t> p2pSent, p2pRecv;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;
  bool stop = false;
  std::thread th;
  int64_t timeoutMs() const { return cfg.timeout_ms > 0 ? cfg.timeout_ms : 300000; }

  void put(const std::string& k, const void* p, size_t n) {
    if (store.set(store.ctx, (name + "/" + k).c_str(), static_cast<const uint8_t*>(p), n) != 0)
      throw Err("fake: store set failed");
  }
  std::vector<uint8_t> take(const std::string& k) {
    uint8_t* v = nullptr;
    size_t n = 0;
    int rc = store.get(store.ctx, (name + "/" + k).c_str(), timeoutMs(), &v, &n);
    if (rc == -1) throw Err("fake: timed out waiting for " + k);
    if (rc != 0) throw Err("fake: store get failed for " + k);
    std::vector<uint8_t> out(v, v + n);
    free(v);
    return out;
  }
  bool has(const std::string& k) { return store.check(store.ctx, (name + "/" + k).c_str()) == 1; }
};

std::mutex g_mu;
uint64_t g_next = 1;
std::map<uint64_t, std::shared_ptr<Group>> g_groups;
std::map<uint64_t, std::shared_ptr<Work>> g_works;

std::shared_ptr<Group> group(uint64_t h) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_groups.find(h);
  return it == g_groups.end() ? nullptr : it->second;
}
std::shared_ptr<Work> work(uint64_t h) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_works.find(h);
  return it == g_works.end() ? nullptr : it->second;
}

int fail(const std::string& m) {
  g_err = m;
  return -600;
}

int64_t esize(int32_t dt) {
  switch (dt) {
    case 0: case 1: case 11: return 1;
    case 2: case 5: case 15: return 2;
    case 3: case 6: return 4;
    case 4: case 7: return 8;
    default: return -1;
  }
}

template <typename T, typename A>
void reduceT(T* d, const T* s, int64_t n, int32_t op) {
  for (int64_t i = 0; i < n; ++i) {
    A a = static_cast<A>(d[i]), b = static_cast<A>(s[i]);
    A r;
    switch (op) {
      case 0: case 1: r = a + b; break;
      case 2: r = a * b; break;
      case 3: r = b < a ? b : a; break;
      case 4: r = b > a ? b : a; break;
      default: throw Err("fake: bad op");
    }
    d[i] = static_cast<T>(r);
  }
}
template <typename T>
void bitT(T* d, const T* s, int64_t n, int32_t op) {
  for (int64_t i = 0; i < n; ++i) {
    if (op == 5) d[i] = d[i] & s[i];
    else if (op == 6) d[i] = d[i] | s[i];
    else d[i] = d[i] ^ s[i];
  }
}
template <typename T, typename A>
void divT(T* d, int64_t n, int k) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(static_cast<A>(d[i]) / static_cast<A>(k));
}

void reduce(void* d, const void* s, int64_t n, int32_t dt, int32_t op) {
  if (op >= 5) {
    switch (dt) {
      case 0: bitT((uint8_t*)d, (const uint8_t*)s, n, op); return;
      case 1: bitT((int8_t*)d, (const int8_t*)s, n, op); return;
      case 2: bitT((int16_t*)d, (const int16_t*)s, n, op); return;
      case 3: bitT((int32_t*)d, (const int32_t*)s, n, op); return;
      case 4: bitT((int64_t*)d, (const int64_t*)s, n, op); return;
      case 11: bitT((uint8_t*)d, (const uint8_t*)s, n, op); return;
      default: throw Err("fake: bitwise op on a floating dtype");
    }
  }
  switch (dt) {
    case 0: reduceT<uint8_t, uint8_t>((uint8_t*)d, (const uint8_t*)s, n, op); return;
    case 1: reduceT<int8_t, int8_t>((int8_t*)d, (const int8_t*)s, n, op); return;
    case 2: reduceT<int16_t, int16_t>((int16_t*)d, (const int16_t*)s, n, op); return;
    case 3: reduceT<int32_t, int32_t>((int32_t*)d, (const int32_t*)s, n, op); return;
    case 4: reduceT<int64_t, int64_t>((int64_t*)d, (const int64_t*)s, n, op); return;
    case 5: reduceT<c10::Half, float>((c10::Half*)d, (const c10::Half*)s, n, op); return;
    case 6: reduceT<float, float>((float*)d, (const float*)s, n, op); return;
    case 7: reduceT<double, double>((double*)d, (const double*)s, n, op); return;
    case 15: reduceT<c10::BFloat16, float>((c10::BFloat16*)d, (const c10::BFloat16*)s, n, op); return;
    case 11: {
      auto* a = (uint8_t*)d; auto* b = (const uint8_t*)s;
      for (int64_t i = 0; i < n; ++i) {
        bool x = a[i], y = b[i];
        a[i] = (op == 2 || op == 3) ? (x && y) : (x || y);
      }
      return;
    }
  }
  throw Err("fake: unsupported dtype");
}

void divide(void* d, int64_t n, int32_t dt, int k) {
  switch (dt) {
    case 0: divT<uint8_t, uint8_t>((uint8_t*)d, n, k); return;
    case 1: divT<int8_t, int8_t>((int8_t*)d, n, k); return;
    case 2: divT<int16_t, int16_t>((int16_t*)d, n, k); return;
    case 3: divT<int32_t, int32_t>((int32_t*)d, n, k); return;
    case 4: divT<int64_t, int64_t>((int64_t*)d, n, k); return;
    case 5: divT<c10::Half, float>((c10::Half*)d, n, k); return;
    case 6: divT<float, float>((float*)d, n, k); return;
    case 7: divT<double, double>((double*)d, n, k); return;
    case 15: divT<c10::BFloat16, float>((c10::BFloat16*)d, n, k); return;
    default: return;
  }
}

int submit(uint64_t pg, uint64_t* out, std::function<void(Group&, Work&)> fn) {
  auto g = group(pg);
  if (!g) return fail("fake: unknown group handle");
  auto w = std::make_shared<Work>();
  uint64_t h;
  {
    std::lock_guard<std::mutex> l(g_mu);
    h = g_next++;
    g_works[h] = w;
  }
  Group* gp = g.get();
  {
    std::lock_guard<std::mutex> l(g->mu);
    g->q.push_back([gp, w, fn]() {
      std::string err;
      try {
        fn(*gp, *w);
      } catch (const std::exception& e) {
        err = e.what();
      }
      std::lock_guard<std::mutex> l2(w->mu);
      w->done = true;
      w->ok = err.empty();
      w->err = err;
      w->cv.notify_all();
    });
  }
  g->cv.notify_one();
  *out = h;
  return 0;
}

std::string K(int64_t s, const std::string& rest) { return "c/" + std::to_string(s) + "/" + rest; }

// Publishes (size header + data) and returns every rank's blob (rank order), checking sizes.
std::vector<std::vector<uint8_t>> exchangeAll(Group& g, int64_t s, const void* p, int64_t n,
                                             const char* op, bool need = true) {
  int me = g.cfg.rank, size = g.cfg.size;
  g.put(K(s, std::to_string(me)), p, n);
  std::vector<std::vector<uint8_t>> all(size);
  if (!need) return all;
  for (int r = 0; r < size; ++r) {
    all[r] = g.take(K(s, std::to_string(r)));
    if ((int64_t)all[r].size() != n)
      throw Err(std::string("fake ") + op + ": size mismatch: rank " + std::to_string(me) +
                " has " + std::to_string(n) + " bytes, rank " + std::to_string(r) + " has " +
                std::to_string(all[r].size()));
  }
  return all;
}

} // namespace

extern "C" {

const char* mooncake_last_error(void) { return g_err.c_str(); }
const char* mooncake_version(void) { return "fake-0"; }

int mc_pg_create(const mc_pg_config* cfg, const mc_store_ops* store, uint64_t* out_pg) {
  if (!cfg || !store || !out_pg) return fail("fake: null argument");
  if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size) return fail("fake: bad rank/size");
  auto g = std::make_shared<Group>();
  g->cfg = *cfg;
  g->name = std::string("fake/") + (cfg->group_name ? cfg->group_name : "");
  g->store = *store;
  try {
    g->put("hello/" + std::to_string(cfg->rank), "x", 1);
    for (int r = 0; r < cfg->size; ++r) g->take("hello/" + std::to_string(r));
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  Group* gp = g.get();
  g->th = std::thread([gp]() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(gp->mu);
        gp->cv.wait(l, [&] { return gp->stop || !gp->q.empty(); });
        if (gp->q.empty()) return;
        job = std::move(gp->q.front());
        gp->q.pop_front();
      }
      job();
    }
  });
  std::lock_guard<std::mutex> l(g_mu);
  *out_pg = g_next++;
  g_groups[*out_pg] = g;
  return 0;
}

int mc_pg_destroy(uint64_t pg) {
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> l(g_mu);
    auto it = g_groups.find(pg);
    if (it == g_groups.end()) return fail("fake: unknown group");
    g = it->second;
    g_groups.erase(it);
  }
  {
    std::lock_guard<std::mutex> l(g->mu);
    g->stop = true;
  }
  g->cv.notify_all();
  g->th.join();
  return 0;
}

int mc_pg_broadcast(uint64_t pg, void* buf, int64_t nbytes, int32_t root, uint64_t* work) {
  return submit(pg, work, [=](Group& g, Work&) {
    int64_t s = g.seq++;
    if (g.cfg.rank == root) {
      g.put(K(s, "b"), buf, nbytes);
    } else {
      auto v = g.take(K(s, "b"));
      if ((int64_t)v.size() != nbytes)
        throw Err("fake broadcast: size mismatch with root: " + std::to_string(v.size()) +
                  " vs " + std::to_string(nbytes));
      memcpy(buf, v.data(), nbytes);
    }
  });
}

static void doReduce(Group& g, void* buf, int64_t count, int32_t dtype, int32_t op, int root) {
  int64_t s = g.seq++;
  int64_t n = count * esize(dtype);
  auto all = exchangeAll(g, s, buf, n, "allreduce", root < 0 || root == g.cfg.rank);
  if (root >= 0 && root != g.cfg.rank) return;
  std::vector<uint8_t> acc(all[0]);
  for (int r = 1; r < g.cfg.size; ++r) reduce(acc.data(), all[r].data(), count, dtype, op);
  if (op == 1) divide(acc.data(), count, dtype, g.cfg.size);
  memcpy(buf, acc.data(), n);
}

int mc_pg_allreduce(uint64_t pg, void* buf, int64_t count, int32_t dtype, int32_t op, uint64_t* work) {
  if (esize(dtype) < 0) return fail("fake allreduce: unsupported dtype " + std::to_string(dtype));
  return submit(pg, work, [=](Group& g, Work&) { doReduce(g, buf, count, dtype, op, -1); });
}

int mc_pg_reduce(uint64_t pg, void* buf, int64_t count, int32_t dtype, int32_t op, int32_t root,
                 uint64_t* work) {
  if (esize(dtype) < 0) return fail("fake reduce: unsupported dtype");
  return submit(pg, work, [=](Group& g, Work&) { doReduce(g, buf, count, dtype, op, root); });
}

int mc_pg_allgather(uint64_t pg, const void* in, int64_t nbytes, void* const* outs, uint64_t* work) {
  auto g0 = group(pg);
  if (!g0) return fail("fake: unknown group");
  std::vector<void*> o(outs, outs + g0->cfg.size);
  return submit(pg, work, [=](Group& g, Work&) {
    auto all = exchangeAll(g, g.seq++, in, nbytes, "allgather");
    for (int r = 0; r < g.cfg.size; ++r) memcpy(o[r], all[r].data(), nbytes);
  });
}

int mc_pg_gather(uint64_t pg, const void* in, int64_t nbytes, void* const* outs, int32_t root,
                 uint64_t* work) {
  auto g0 = group(pg);
  if (!g0) return fail("fake: unknown group");
  std::vector<void*> o;
  if (g0->cfg.rank == root) o.assign(outs, outs + g0->cfg.size);
  return submit(pg, work, [=](Group& g, Work&) {
    auto all = exchangeAll(g, g.seq++, in, nbytes, "gather", g.cfg.rank == root);
    if (g.cfg.rank == root)
      for (int r = 0; r < g.cfg.size; ++r) memcpy(o[r], all[r].data(), nbytes);
  });
}

int mc_pg_scatter(uint64_t pg, const void* const* ins, void* out, int64_t nbytes, int32_t root,
                  uint64_t* work) {
  auto g0 = group(pg);
  if (!g0) return fail("fake: unknown group");
  std::vector<const void*> in;
  if (g0->cfg.rank == root) in.assign(ins, ins + g0->cfg.size);
  return submit(pg, work, [=](Group& g, Work&) {
    int64_t s = g.seq++;
    if (g.cfg.rank == root)
      for (int r = 0; r < g.cfg.size; ++r) g.put(K(s, "to/" + std::to_string(r)), in[r], nbytes);
    auto v = g.take(K(s, "to/" + std::to_string(g.cfg.rank)));
    if ((int64_t)v.size() != nbytes) throw Err("fake scatter: size mismatch");
    memcpy(out, v.data(), nbytes);
  });
}

int mc_pg_reduce_scatter(uint64_t pg, const void* const* ins, void* out, int64_t count,
                         int32_t dtype, int32_t op, uint64_t* work) {
  auto g0 = group(pg);
  if (!g0) return fail("fake: unknown group");
  if (esize(dtype) < 0) return fail("fake reduce_scatter: unsupported dtype");
  std::vector<const void*> in(ins, ins + g0->cfg.size);
  return submit(pg, work, [=](Group& g, Work&) {
    int64_t s = g.seq++;
    int64_t n = count * esize(dtype);
    int me = g.cfg.rank;
    for (int r = 0; r < g.cfg.size; ++r)
      g.put(K(s, std::to_string(me) + "/to/" + std::to_string(r)), in[r], n);
    std::vector<uint8_t> acc;
    for (int r = 0; r < g.cfg.size; ++r) {
      auto v = g.take(K(s, std::to_string(r) + "/to/" + std::to_string(me)));
      if ((int64_t)v.size() != n) throw Err("fake reduce_scatter: size mismatch");
      if (r == 0) acc = v;
      else reduce(acc.data(), v.data(), count, dtype, op);
    }
    if (op == 1) divide(acc.data(), count, dtype, g.cfg.size);
    memcpy(out, acc.data(), n);
  });
}

int mc_pg_alltoall(uint64_t pg, const void* const* ins, const int64_t* in_bytes, void* const* outs,
                   const int64_t* out_bytes, uint64_t* work) {
  auto g0 = group(pg);
  if (!g0) return fail("fake: unknown group");
  int size = g0->cfg.size;
  std::vector<const void*> in(ins, ins + size);
  std::vector<void*> o(outs, outs + size);
  std::vector<int64_t> ib(in_bytes, in_bytes + size), ob(out_bytes, out_bytes + size);
  return submit(pg, work, [=](Group& g, Work&) {
    int64_t s = g.seq++;
    int me = g.cfg.rank;
    for (int r = 0; r < size; ++r)
      g.put(K(s, std::to_string(me) + "/to/" + std::to_string(r)), in[r], ib[r]);
    for (int r = 0; r < size; ++r) {
      auto v = g.take(K(s, std::to_string(r) + "/to/" + std::to_string(me)));
      if ((int64_t)v.size() != ob[r])
        throw Err("fake alltoall: rank " + std::to_string(r) + " sent " +
                  std::to_string(v.size()) + " bytes, expected " + std::to_string(ob[r]));
      memcpy(o[r], v.data(), ob[r]);
    }
  });
}

int mc_pg_send(uint64_t pg, const void* buf, int64_t nbytes, int32_t dst, int32_t tag,
               uint64_t* work) {
  return submit(pg, work, [=](Group& g, Work&) {
    std::string k = "p/" + std::to_string(g.cfg.rank) + "/" + std::to_string(dst) + "/" +
        std::to_string(tag);
    int64_t n = g.p2pSent[k]++;
    g.put(k + "/" + std::to_string(n), buf, nbytes);
  });
}

int mc_pg_recv(uint64_t pg, void* buf, int64_t nbytes, int32_t src, int32_t tag, uint64_t* work) {
  return submit(pg, work, [=](Group& g, Work& w) {
    auto key = [&](int s) {
      return "p/" + std::to_string(s) + "/" + std::to_string(g.cfg.rank) + "/" +
          std::to_string(tag);
    };
    int from = src;
    if (from < 0) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(g.timeoutMs());
      for (;;) {
        for (int s = 0; s < g.cfg.size && from < 0; ++s) {
          if (s == g.cfg.rank) continue;
          if (g.has(key(s) + "/" + std::to_string(g.p2pRecv[key(s)]))) from = s;
        }
        if (from >= 0) break;
        if (std::chrono::steady_clock::now() > deadline) throw Err("fake recv: timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::string k = key(from);
    int64_t n = g.p2pRecv[k]++;
    auto v = g.take(k + "/" + std::to_string(n));
    if ((int64_t)v.size() != nbytes)
      throw Err("fake recv: size mismatch: got " + std::to_string(v.size()) + " bytes, expected " +
                std::to_string(nbytes));
    memcpy(buf, v.data(), nbytes);
    w.source = from;
  });
}

int mc_pg_barrier(uint64_t pg, uint64_t* work) {
  return submit(pg, work, [=](Group& g, Work&) { exchangeAll(g, g.seq++, "b", 1, "barrier"); });
}

int mc_work_wait(uint64_t h, int64_t timeout_ms) {
  auto w = work(h);
  if (!w) return fail("fake: unknown work");
  std::unique_lock<std::mutex> l(w->mu);
  if (timeout_ms < 0) timeout_ms = 3600000;
  if (!w->cv.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return w->done; }))
    return -2;
  if (!w->ok) {
    g_err = w->err;
    return -1;
  }
  return 0;
}
int mc_work_test(uint64_t h) {
  auto w = work(h);
  if (!w) return fail("fake: unknown work");
  std::lock_guard<std::mutex> l(w->mu);
  return w->done ? 1 : 0;
}
int mc_work_is_success(uint64_t h) {
  auto w = work(h);
  if (!w) return 0;
  std::lock_guard<std::mutex> l(w->mu);
  return w->done && w->ok;
}
int mc_work_error(uint64_t h, char* buf, int32_t buflen) {
  auto w = work(h);
  if (!w) return 0;
  std::lock_guard<std::mutex> l(w->mu);
  if (buf && buflen > 0) {
    size_t n = std::min<size_t>(w->err.size(), buflen - 1);
    memcpy(buf, w->err.data(), n);
    buf[n] = 0;
  }
  return (int)w->err.size();
}
int32_t mc_work_source(uint64_t h) {
  auto w = work(h);
  if (!w) return -1;
  std::lock_guard<std::mutex> l(w->mu);
  return w->source;
}
int mc_work_failed_ranks(uint64_t h, int32_t* out, int32_t n) {
  for (int i = 0; i < n; ++i) out[i] = 0;
  return 0;
}
int mc_work_free(uint64_t h) {
  std::lock_guard<std::mutex> l(g_mu);
  g_works.erase(h);
  return 0;
}
int mc_pg_get_active_ranks(uint64_t pg, int32_t* out, int32_t n) {
  auto g = group(pg);
  if (!g) return fail("fake: unknown group");
  for (int i = 0; i < n; ++i) out[i] = i < g->cfg.size ? 1 : 0;
  return 0;
}
int32_t mc_pg_max_group_size(uint64_t pg) {
  auto g = group(pg);
  if (!g) return -1;
  return g->cfg.max_group_size > 0 ? g->cfg.max_group_size : g->cfg.size;
}
int64_t mc_pg_current_epoch(uint64_t pg) { return group(pg) ? 0 : -1; }

} // extern "C"
