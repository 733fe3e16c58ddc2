"""One rank of tests/test_elastic_parity.py: code written against upstream Mooncake PG's
elastic API (``mooncake_pg``), run as a real process.

    python tests/elastic_parity_worker.py --port P --rank R --world N --scenario S [--role ROLE]

Each scenario is the sequence a user of upstream's API writes; the worker records what it saw
and prints one line "RESULT <json>". The rendezvous store is a TCPStore hosted by the test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import mooncake  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import mooncake_pg as pg  # noqa: E402
from elastic_worker import wait_for as wait_until  # noqa: E402


def wait_key(store, key: str, timeout: float = 60.0) -> None:
    wait_until(lambda: store.check([key]), f"store key {key}", timeout)


def init(store, rank: int, world: int, opts) -> None:
    dist.init_process_group("mooncake-cpu", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60), pg_options=opts)


def all_reduce(value: int, group=None) -> dict:
    """An async int32 all_reduce of value: the sum, get_local_success and the hint mask."""
    t = torch.tensor([value], dtype=torch.int32)
    w = dist.all_reduce(t, group=group, async_op=True)
    w.wait()
    hint = pg.get_failed_ranks_hint(w)
    return {"sum": int(t.item()), "ok": pg.get_local_success(w),
            "hint": hint.tolist(), "hint_is_tensor": isinstance(hint, torch.Tensor)}


def active() -> list:
    return pg.get_active_ranks(None).cpu().tolist()


def exchange(rank: int, peer: int, n: int = 1024) -> bool:
    """rank sends its rank to peer and receives peer's; True when the bytes are right."""
    out = torch.full((n,), rank, dtype=torch.int32)
    got = torch.empty(n, dtype=torch.int32)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, got, peer)])
    for w in works:
        w.wait()
    return bool(torch.equal(got, torch.full((n,), peer, dtype=torch.int32)))


def manual(a, store, out: dict) -> None:
    """Manual mode: the hint mask, then deactivate_ranks and recover_ranks by hand."""
    opts = pg.MooncakeBackendOptions(a.world, False, False, False)  # upstream's positional order
    victim = a.world - 1
    init(store, a.rank, a.world, opts)
    if a.role == "replacement":
        out["join"] = int(pg.join_group(None).status)
        out["full"] = all_reduce(a.rank + 1)
        return
    out["round1"] = all_reduce(a.rank + 1)
    out["active1"] = active()
    if a.rank == victim:
        print("RESULT " + json.dumps(out), flush=True)
        os._exit(0)  # the process is gone; nothing told the group
    wait_until(lambda: not pg.get_peer_state(None, [victim])[0], "the victim to exit")
    if a.rank == 0:
        w = dist.isend(torch.ones(16), victim)
        w.wait()
        out["send_to_dead"] = {"ok": pg.get_local_success(w), "hint": pg.get_failed_ranks_hint(w).tolist()}
    out["round2"] = all_reduce(a.rank + 1)
    out["active2"] = active()
    # get_active_ranks applies decisions other ranks already wrote to the log: without this
    # barrier a survivor that is ahead may have deactivated the victim before this one looks.
    store.set(f"active2_{a.rank}", b"1")
    for r in range(victim):
        wait_key(store, f"active2_{r}")
    s = pg.sync_after_failure(None)
    out["sync"] = s.status.name
    out["peer_state_after_sync"] = pg.get_peer_state(None, [victim])
    r = pg.deactivate_ranks(None, [victim])
    out["deactivate"] = [r.status.name, r.dropped_ranks]
    out["active3"] = active()
    out["round3"] = all_reduce(a.rank + 1)
    store.set(f"survivor_{a.rank}_waiting", b"1")
    wait_until(lambda: pg.get_peer_state(None, [victim])[0], "the replacement's endpoint")
    r = pg.recover_ranks(None, [victim])
    out["recover"] = r.status.name
    out["full"] = all_reduce(a.rank + 1)
    out["active4"] = active()


def join(a, store, out: dict) -> None:
    """A rank started for the full world size joins ranks that started with fewer."""
    full = a.world  # the originals start with full - 1
    if a.role == "joiner":
        flag = a.variant == "is_extension"
        init(store, a.rank, full, pg.MooncakeBackendOptions(full, is_extension=flag))
        out["world_size_before"] = dist.get_world_size()
        out["before_join"] = all_reduce(a.rank + 1)  # over itself alone
        out["join"] = int(pg.join_group(None).status)
    else:
        init(store, a.rank, full - 1, pg.MooncakeBackendOptions(full))
        out["initial"] = all_reduce(a.rank + 1)
        store.set(f"original_{a.rank}_up", b"1")
        wait_until(lambda: pg.get_peer_state(None, [full - 1])[0], "the joiner's endpoint")
        r = pg.recover_ranks(None, [full - 1])
        out["recover"] = r.status.name
    out["world_size"] = dist.get_world_size()
    out["full"] = all_reduce(a.rank + 1)
    outs = [torch.zeros(2, dtype=torch.int32) for _ in range(dist.get_world_size())]
    dist.all_gather(outs, torch.full((2,), a.rank, dtype=torch.int32))
    out["all_gather"] = [int(o[0]) for o in outs]
    sub = dist.new_group([0, full - 1])  # made by every rank, after the extension
    if a.rank in (0, full - 1):
        out["sub"] = all_reduce(a.rank + 1, group=sub)
        out["sub_p2p"] = exchange(a.rank, full - 1 - a.rank, 256) if a.rank == 0 else exchange(a.rank, 0, 256)


def leave(a, store, out: dict) -> None:
    """deactivate_ranks on the own rank before destroy_process_group, then a rejoin."""
    opts = pg.MooncakeBackendOptions(2)
    if a.role == "rejoiner":  # a new process for the rank that left
        init(store, 1, 2, opts)
        store.set("reinit_done", b"1")
        out["join"] = int(pg.join_group(None).status)
        out["after"] = all_reduce(2)
        out["p2p"] = exchange(1, 0)
        return
    init(store, a.rank, 2, opts)
    out["before"] = all_reduce(a.rank + 1)
    if a.rank == 1:
        r = pg.deactivate_ranks(None, [1])
        out["leave"] = [r.status.name, r.new_epoch]
        dist.destroy_process_group()
        store.set("left", b"1")
        if a.variant == "new_process":
            return
        init(store, 1, 2, opts)  # the same process comes back
        store.set("reinit_done", b"1")
        out["join"] = int(pg.join_group(None).status)
        out["after"] = all_reduce(2)
        out["p2p"] = exchange(1, 0)
        return
    wait_key(store, "left")
    out["active_after_leave"] = active()
    out["world_size_after_leave"] = dist.get_world_size()
    out["alone"] = all_reduce(1)
    wait_key(store, "reinit_done")
    wait_until(lambda: pg.get_peer_state(None, [1])[0], "the returning rank's endpoint")
    r = pg.recover_ranks(None, [1])
    out["recover"] = r.status.name
    out["active_after_recover"] = active()
    out["after"] = all_reduce(1)
    out["p2p"] = exchange(0, 1)


def send_dead(a, store, out: dict) -> None:
    """isend to a rank whose process exited (default options: auto deactivate and sync)."""
    init(store, a.rank, 2, None)
    out["before"] = all_reduce(a.rank + 1)
    if a.rank == 1:
        print("RESULT " + json.dumps(out), flush=True)
        os._exit(0)
    wait_until(lambda: not pg.get_peer_state(None, [1])[0], "rank 1 to exit")
    t0 = time.time()
    w = dist.isend(torch.ones(1024), 1)
    w.wait()
    out["send"] = {"ok": pg.get_local_success(w), "hint": pg.get_failed_ranks_hint(w).tolist(),
                   "seconds": round(time.time() - t0, 3)}
    out["alone"] = all_reduce(1)


def outputs(a, store, out: dict) -> None:
    """After a rank's death, size-dependent collectives sized by the active ranks."""
    victim = 1  # not the last rank: the world size stays 4, 3 ranks are active
    init(store, a.rank, a.world, None)
    out["before"] = all_reduce(a.rank + 1)
    if a.rank == victim:
        print("RESULT " + json.dumps(out), flush=True)
        os._exit(0)
    wait_until(lambda: not pg.get_peer_state(None, [victim])[0], "the victim to exit")
    out["after"] = all_reduce(a.rank + 1)
    out["active"] = active()
    n = int(pg.get_active_ranks(None).sum())
    inp = torch.tensor([a.rank + 1], dtype=torch.int32)
    o = torch.zeros(n, dtype=torch.int32)
    dist.all_gather_into_tensor(o, inp)
    out["all_gather_into_tensor"] = o.tolist()
    outs = [torch.zeros(1, dtype=torch.int32) for _ in range(n)]
    dist.all_gather(outs, inp)
    out["all_gather"] = [int(t) for t in outs]
    rs = torch.zeros(1, dtype=torch.int32)
    dist.reduce_scatter_tensor(rs, torch.arange(1, n + 1, dtype=torch.int32))
    out["reduce_scatter_tensor"] = int(rs)
    rs = torch.zeros(1, dtype=torch.int32)
    dist.reduce_scatter(rs, [torch.tensor([10 * (i + 1)], dtype=torch.int32) for i in range(n)])
    out["reduce_scatter"] = int(rs)
    full = torch.full((a.world,), -1, dtype=torch.int32)  # one entry per rank still works
    dist.all_gather_into_tensor(full, inp)
    out["all_gather_full"] = full.tolist()
    try:
        dist.all_gather_into_tensor(torch.zeros(2, dtype=torch.int32), inp)
        out["two_entries"] = "accepted"
    except Exception as e:  # noqa: BLE001
        out["two_entries"] = str(e)[:300]
    # Stay until every survivor made that call: it probes the group, and a survivor that had
    # exited meanwhile would be found dead (and 2 entries would then fit the 2 left).
    store.add("outputs_done", 1)
    wait_until(lambda: int(store.add("outputs_done", 0)) >= n, "the other survivors")


def listening_addrs() -> list:
    """The IPv4 addresses this process listens on (its sockets in /proc/self/net/tcp)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    addrs = set()
    with open("/proc/self/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                ip = bytes.fromhex(parts[1].split(":")[0])[::-1]
                addrs.add(".".join(str(b) for b in ip))
    return sorted(addrs)


def device_filter(a, store, out: dict) -> None:
    """set_device_filter picks the interface the engine listens on; unknown names fail."""
    try:
        pg.set_device_filter(["no-such-nic0"])
        out["unknown"] = "accepted"
    except ValueError as e:
        out["unknown"] = str(e)
    try:
        pg.set_host_ip("not-an-ip")
        out["bad_ip"] = "accepted"
    except ValueError as e:
        out["bad_ip"] = str(e)
    pg.set_device_filter(["lo"])
    init(store, a.rank, a.world, None)
    out["sum"] = all_reduce(a.rank + 1)["sum"]
    out["p2p"] = exchange(a.rank, 1 - a.rank)
    out["listening"] = listening_addrs()
    pg.set_device_filter(["lo"])  # the running engine agrees: fine
    out["later"] = {}
    for n in sorted(os.listdir("/sys/class/net")):
        if n != "lo":
            try:
                pg.set_device_filter([n])
                out["later"][n] = "accepted"
            except ValueError as e:
                out["later"][n] = str(e)


SCENARIOS = {"manual": manual, "join": join, "leave": leave, "send_dead": send_dead,
             "device_filter": device_filter, "outputs": outputs}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    ap.add_argument("--role", default="")
    ap.add_argument("--variant", default="")
    a = ap.parse_args()
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ.get("MC_TEST_DUMP_S", "150")), exit=False)
    out: dict = {"rank": a.rank, "role": a.role}
    try:
        store = dist.TCPStore("127.0.0.1", a.port, is_master=False, timeout=timedelta(seconds=60))
        pg.set_collective_timeout_us(10_000_000)
        SCENARIOS[a.scenario](a, store, out)
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # skip destroy: peers may be gone


if __name__ == "__main__":
    sys.exit(main())
