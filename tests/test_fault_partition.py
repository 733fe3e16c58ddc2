"""A network partition: four mooncake-cpu ranks in four network namespaces on one bridge (four
hosts as far as the engine can tell, so the group moves its bytes over tcp), the rendezvous
store on the bridge's address in this namespace. Rank 2 enters step FAULT, its link is cut
(its bridge port down), the others enter the step: they have its contribution, so the step
completes with it there, while rank 2 never gets theirs (it cannot complete it); rank 2 never
takes their messages either, so they probe it and agree it failed (they reach the majority) and
go on without it from step FAULT+1. The link is restored after their step FAULT+1. The majority goes on with correct sums, rank 2's step fails (never a
success), its view is the group's, and it comes back with join_group when the members call
recover_ranks. The same with rank 2 frozen (SIGSTOP) before the step and resumed after the
others finished it without it: between hosts its peers' contributions wait in its sockets, and
its step must still fail (fenced). And the opposite order: rank 2 enters the step last, after
the others' contributions reached it, with its link already cut: it could compute the sum of
four from what it holds, but its own contribution never leaves, so the others finish the step
without it and its step must fail (fenced), never return a value the group did not compute.
Worker: tests/fault_worker.py (scenarios "partition", "partition_last", "sigstop"). Needs root and iproute2; the namespaces, the bridge and its veth pairs
are removed afterwards."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
import torch.distributed as dist

from elastic_harness import HERE, _env, wait_store
from test_fault_matrix import FAULT, RECOVER, check_steps, total

WORKER = os.path.join(HERE, "fault_worker.py")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def bridge():
    if shutil.which("ip") is None:
        pytest.fail("the ip command is missing: `make setup` installs Debian's iproute2")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root")
    tag = uuid.uuid4().hex[:5]
    net = f"10.232.{random.randrange(10, 250)}"
    br = f"mb{tag}"
    ns = [f"mf{tag}{r}" for r in range(4)]
    ports = [f"mr{tag}{r}" for r in range(4)]  # bridge side
    ends = [f"me{tag}{r}" for r in range(4)]  # namespace side
    made: list[str] = []
    try:
        _ip("link", "add", br, "type", "bridge")
        _ip("addr", "add", f"{net}.254/24", "dev", br)
        _ip("link", "set", br, "up")
        for r in range(4):
            _ip("netns", "add", ns[r])
            made.append(ns[r])
            _ip("link", "add", ports[r], "type", "veth", "peer", "name", ends[r])
            _ip("link", "set", ends[r], "netns", ns[r])
            _ip("-n", ns[r], "addr", "add", f"{net}.{r + 1}/24", "dev", ends[r])
            _ip("-n", ns[r], "link", "set", ends[r], "up")
            _ip("-n", ns[r], "link", "set", "lo", "up")
            _ip("link", "set", ports[r], "master", br)
            _ip("link", "set", ports[r], "up")
    except subprocess.CalledProcessError as e:
        for n in made:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        subprocess.run(["ip", "link", "del", br], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {e.stderr.decode().strip()}")
    yield {"net": net, "ns": ns, "ports": ports, "ends": ends}
    for n in ns:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    for p in ports:
        subprocess.run(["ip", "link", "del", p], capture_output=True)
    subprocess.run(["ip", "link", "del", br], capture_output=True)


def reap(procs: dict) -> None:
    """Kills the workers still running (a test that failed before collecting them)."""
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def collect(procs: dict) -> dict:
    """Each worker's RESULT line (as a dict, its log's tail under "_stderr"), by rank."""
    res = {}
    for r, p in procs.items():
        try:
            so, se = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        line = [x for x in so.splitlines() if x.startswith("RESULT ")]
        assert line, f"rank {r} printed no result:\n{so}\n{se[-4000:]}"
        res[r] = json.loads(line[0][7:])
        res[r]["_stderr"] = se[-6000:]
    return res


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("scenario", ["partition", "partition_last", "sigstop"])
def test_partition_majority_goes_on_minority_is_fenced_then_rejoins(bridge, scenario):
    host = f"{bridge['net']}.254"
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=120))
    procs = {}
    try:
        for r in range(4):
            env = dict(_env(), MC_TRANSFER_TIMEOUT="30")
            if scenario == "partition":
                env["FAULT_DONE_AFTER"] = "next"
            env["FAULT_IFACE"] = bridge["ends"][r]
            procs[r] = subprocess.Popen(
                ["ip", "netns", "exec", bridge["ns"][r], sys.executable, WORKER, "--port",
                 str(store.port), "--store-host", host, "--rank", str(r), "--world", "4",
                 "--scenario", scenario],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if scenario == "partition":
            wait_store(store, ["victim_in"])
            time.sleep(0.5)  # its contribution to the step reaches the others
            _ip("link", "set", bridge["ports"][2], "down")
            store.set("cut", b"1")
            wait_store(store, ["done/0", "done/1", "done/3"])
            _ip("link", "set", bridge["ports"][2], "up")
        elif scenario == "partition_last":
            wait_store(store, ["victim_ready"])
            _ip("link", "set", bridge["ports"][2], "down")
            wait_store(store, ["done/0", "done/1", "done/3"])
            _ip("link", "set", bridge["ports"][2], "up")
        else:  # frozen between hosts: the others' contributions wait in its sockets
            wait_store(store, ["stopping"])
            while not stopped(procs[2].pid):
                time.sleep(0.01)
            wait_store(store, ["done/0", "done/1", "done/3"])
            os.kill(procs[2].pid, signal.SIGCONT)
        res = collect(procs)
        for r in range(4):
            assert "error" not in res[r], f"rank {r}: {res[r]['error']}\n{res[r]['_stderr']}\n" + \
                "\n".join(f"rank {q}:\n{res[q]['_stderr'][-2500:]}" for q in range(4))
    finally:
        reap(procs)
    for r in (0, 1, 3):
        first = FAULT + (scenario == "partition")  # the first step without rank 2
        check_steps(res[r], lambda s: total([0, 1, 3]) if first <= s < RECOVER else total(range(4)))
        assert res[r]["recover"] == 1
    v = res[2]
    assert [s[1] for s in v["steps"][:FAULT]] == [total(range(4))] * FAULT
    s, val, err = v["steps"][FAULT]
    if (s, val) != (FAULT, None):
        print(v["_stderr"])
    assert (s, val) == (FAULT, None) and err, v["steps"][FAULT]
    assert v["fenced_view"] == {"active": [1, 1, 0, 1], "epoch": 1}, (v["fenced_view"], err)
    assert v["join"] == 1
    check_steps(v, lambda s: total(range(4)), first=RECOVER)
    for r in range(4):
        assert (res[r]["active"], res[r]["epoch"]) == ([1, 1, 1, 1], 2), r


@pytest.mark.parametrize("op", ["collective", "p2p"])
def test_inplace_rejoin_after_a_cut_link(bridge, op):
    """Upstream's in-place rejoin (its test_pg_elastic test_inplace_rejoin_collective / _p2p, which
    fail rank 1's transfers by interposing upstream's C++ engine): two ranks, rank 1's link cut
    while both run an op, restored; rank 1 rejoins in the same process (join_group) and rank 0
    admits it (activate_ranks). Rank 0, which still reaches the store, decides (one of two: the
    store's first claim) and completes over itself with local success False; rank 1's op never
    succeeds (fenced; a p2p op completes with local success False), and its view is the group's; after the rejoin the op is exact on both again."""
    host = f"{bridge['net']}.254"
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=120))
    procs = {}
    try:
        for r in range(2):
            env = dict(_env(), MC_TRANSFER_TIMEOUT="30", FAULT_IFACE=bridge["ends"][r])
            procs[r] = subprocess.Popen(
                ["ip", "netns", "exec", bridge["ns"][r], sys.executable, WORKER, "--port",
                 str(store.port), "--store-host", host, "--rank", str(r), "--world", "2",
                 "--scenario", f"rejoin_{op}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_store(store, ["victim_in"])
        _ip("link", "set", bridge["ports"][1], "down")
        store.set("cut", b"1")
        wait_store(store, ["fault_done/0"])
        _ip("link", "set", bridge["ports"][1], "up")
        res = collect(procs)
    finally:
        reap(procs)
    logs = "\n".join(f"rank {q}:\n{res[q]['_stderr'][-2500:]}" for q in range(2))
    n_works = 1 if op == "collective" else 2
    for r in range(2):
        assert "error" not in res[r], f"rank {r}: {res[r]['error']}\n{logs}"
        assert res[r]["before"] == [3.0, [True] * n_works, None], (r, res[r]["before"])
        assert res[r]["before_view"] == {"active": [1, 1], "epoch": 0}
    # rank 0 went on alone: its own contribution, local success False
    assert res[0]["fault"][0] == 1.0 and not all(res[0]["fault"][1]), (res[0]["fault"], logs)
    assert res[0]["fault_view"] == {"active": [1, 0], "epoch": 1}, res[0]["fault_view"]
    # rank 1: never a success (a collective fails fenced; a p2p op completes with local
    # success False, its receive untouched, as upstream's do), with the group's view
    v, ok, err = res[1]["fault"]
    if op == "collective":
        assert v is None and "fenced" in err, (res[1]["fault"], logs)
    else:
        assert (v, ok, err) == (2.0, [False, False], None), (res[1]["fault"], logs)
    assert res[1]["fault_view"] == {"active": [1, 0], "epoch": 1}, (res[1]["fault_view"], logs)
    assert res[1]["join"] == 1 and res[0]["activate"] == 1, (res[1].get("join"), res[0].get("activate"))
    for r in range(2):
        assert res[r]["after"] == [3.0, [True] * n_works, None], (r, res[r]["after"], logs)
        assert res[r]["after_view"] == {"active": [1, 1], "epoch": 2}, (r, res[r]["after_view"])


def test_survivors_split_on_the_cut_step_end_it_alike(bridge):
    """The survivors split on the step at the cut (scenario "split" of tests/fault_worker.py):
    rank 2's contribution to step FAULT reaches ranks 0 and 1 but not rank 3 (the test drops
    what rank 2 sends rank 3 with a rule in rank 3's namespace), so ranks 0 and 1 (and rank 2)
    complete the step while rank 3 cannot; then rank 2's link is cut. Rank 3 finds rank 2 silent
    and the group removes it, and rank 3 must end step FAULT with the sum of four the others
    returned (handed over, pg/handover.go), not run the step again over three with their step
    FAULT+1 (a sum mixing two steps) nor fail it. Every step on every survivor is exact (a
    contribution names its step), rank 2's step FAULT fails, and it rejoins at step RECOVER."""
    host = f"{bridge['net']}.254"
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=120))
    procs = {}
    ns3 = bridge["ns"][3]
    # Packets from rank 2 arriving in rank 3's namespace are dropped (silently: rank 2's probes
    # of rank 3 time out as a cut would make them), packets rank 3 sends are not: the rule sits
    # before the local table's (pref 0, moved to pref 20 meanwhile).
    drop = ["rule", "add", "pref", "10", "from", f"{bridge['net']}.3", "iif", bridge["ends"][3],
            "blackhole"]
    try:
        for r in range(4):
            env = dict(_env(), MC_TRANSFER_TIMEOUT="30", FAULT_STEP_VALUES="1",
                       FAULT_IFACE=bridge["ends"][r])
            procs[r] = subprocess.Popen(
                ["ip", "netns", "exec", bridge["ns"][r], sys.executable, WORKER, "--port",
                 str(store.port), "--store-host", host, "--rank", str(r), "--world", "4",
                 "--scenario", "split"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_store(store, [f"ready/{r}" for r in range(4)])
        _ip("-n", ns3, *drop)
        _ip("-n", ns3, "rule", "add", "pref", "20", "lookup", "local")
        _ip("-n", ns3, "rule", "del", "pref", "0")
        store.set("go", b"1")
        wait_store(store, ["done/0", "done/1"])  # they completed the step (rank 2 took theirs)
        time.sleep(0.5)  # rank 2's credits for their messages are back with them
        _ip("link", "set", bridge["ports"][2], "down")
        wait_store(store, ["done/3"])
        _ip("-n", ns3, "rule", "add", "pref", "0", "lookup", "local")
        _ip("-n", ns3, "rule", "del", "pref", "20")
        _ip("-n", ns3, "rule", "del", "pref", "10")
        _ip("link", "set", bridge["ports"][2], "up")
        res = collect(procs)
    finally:
        reap(procs)
    logs = "\n".join(f"rank {q}:\n{res[q]['_stderr'][-3000:]}" for q in range(4))
    for r in range(4):
        assert "error" not in res[r], f"rank {r}: {res[r]['error']}\n{logs}"

    def want(s: int) -> float:
        ranks = [0, 1, 3] if FAULT < s < RECOVER else range(4)
        return total(ranks) + 100.0 * s * len(ranks)

    for r in (0, 1, 3):
        check_steps(res[r], want)
        assert res[r]["recover"] == 1
    v = res[2]
    assert [s[1] for s in v["steps"][:FAULT]] == [want(s) for s in range(FAULT)]
    s, val, err = v["steps"][FAULT]
    assert (s, val) == (FAULT, None) and err, (v["steps"][FAULT], logs)
    assert v["join"] == 1
    check_steps(v, want, first=RECOVER)
    for r in range(4):
        assert (res[r]["active"], res[r]["epoch"]) == ([1, 1, 1, 1], 2), r
