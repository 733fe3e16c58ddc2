"""The RL training integration page (docs/upstream/getting_started__examples__rl-training-
integration.md), on a fresh host (a private network namespace) so its fixed addresses
(localhost:8080, localhost:50051, localhost:12345/12346) work as written.

Substitutions (docs/docs-tests.md): upstream's paths mooncake-rl/examples/ and
mooncake-transfer-engine/example/http-metadata-server-python/ are our examples/; `pip install
aiohttp` is dropped (our bootstrap server needs only the standard library); ./build/mooncake_master
is the installed mooncake_master; the clients' "rdma"/"erdma_N" (no RDMA NIC here: asserted) become
"tcp"/"". The page starts two metadata servers on port 8080 (bootstrap_server.py, then the master's
own): the second cannot bind, as the test shows, so the flow runs with either one."""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from .conftest import ROOT, block, blocks, shell_command, substitute

PAGE = "getting_started__examples__rl-training-integration"
EXAMPLES = os.path.join(ROOT, "examples")


def rl_command() -> str:
    cmd = shell_command(block(PAGE, 6, "rl_samples.py").text)
    return substitute(cmd, ("python mooncake-rl/examples/rl_samples.py",
                            f"python {EXAMPLES}/rl_samples.py"))


def check_rl_run(out: str, workdir: str) -> None:
    """The page's run: 10 rollouts plus the warm-up, each handed over byte for byte; checkpoints
    at rollouts 4 and 9 (--save_interval=5) of both actors (--num_train_actor=2)."""
    put = re.findall(r"^\[RolloutManager\] rollout (\d+): put 2 samples under key '(\d+)' "
                     r"\(sha256 (\w+)\)$", out, re.M)
    got = re.findall(r"^\[TrainGroup\] rollout (\d+): got 2 samples from key '(\d+)' "
                     r"\(sha256 (\w+)\)$", out, re.M)
    assert [p[0] for p in put] == ["0"] + [str(i) for i in range(10)], out[-3000:]
    assert put == got
    assert len({p[2] for p in put[1:]}) == 10  # ten different rollouts
    assert out.rstrip().endswith("done: 11 rollout(s) exchanged through Mooncake Store, every one "
                                 "byte-exact"), out[-3000:]
    evals = re.findall(r"^\[RolloutManager\] Evaluation at rollout (\d+)$", out, re.M)
    assert evals == ["0", "4", "9"]  # the warm-up, then every --eval_interval=5
    ck = os.path.join(workdir, "checkpoints")
    for rid in (4, 9):
        for actor in (0, 1):
            assert os.path.getsize(os.path.join(ck, f"actor_{actor}_rollout_{rid}.pt")) > 0
        assert os.path.exists(os.path.join(ck, "rollout", f"global_dataset_state_dict_{rid}.pt"))


def test_the_page_has_these_blocks():
    langs = [(b.index, b.lang) for b in blocks(PAGE)]
    assert langs == [(0, ""), (1, "python"), (2, "python"), (3, "python"), (4, "bash"),
                     (5, "bash"), (6, "bash"), (7, "python"), (8, "python"), (9, "python")]
    assert "Rollout Engines" in blocks(PAGE)[0].text  # a diagram, not a command


def test_start_the_metadata_server(fresh_host, tmp_path):
    text = block(PAGE, 4, "bootstrap_server.py").text
    cmd = substitute(text, ("cd mooncake-transfer-engine/example/http-metadata-server-python\n",
                            f"cd {EXAMPLES}\n"),
                     ("pip install aiohttp\n", ""),
                     ("python bootstrap_server.py &\n", "exec python bootstrap_server.py\n"))
    p = fresh_host.spawn(cmd, "bootstrap_server")
    p.wait_log(r"HTTP metadata server ready at http://127\.0\.0\.1:8080/metadata")
    probe = tmp_path / "probe.py"
    probe.write_text("import sys, urllib.request, urllib.error\n"
                     "import mooncake.http_metadata_server\n"
                     "print('aiohttp' in sys.modules)\n"
                     "try:\n    urllib.request.urlopen('http://localhost:8080/metadata?key=nothing')\n"
                     "except urllib.error.HTTPError as e:\n    print(e.code)\n")
    r = fresh_host.sh(f"python {probe}")
    assert r.output.split() == ["False", "404"], r.output


def test_start_the_master_beside_the_bootstrap_server(fresh_host):
    text = block(PAGE, 5, "mooncake_master").text
    literal = substitute(shell_command(text), ("./build/mooncake_master", "exec mooncake_master"))
    p = fresh_host.spawn(literal, "master_literal")
    assert p.wait(60) != 0
    assert ("listen for http metadata on 0.0.0.0:8080: listen tcp 0.0.0.0:8080: bind: address "
            "already in use") in p.log()
    # bootstrap_server.py already serves the metadata: the master without its own
    cmd = substitute(literal, (" --enable_http_metadata_server=true", ""),
                     (" --http_metadata_server_host=0.0.0.0", ""),
                     (" --http_metadata_server_port=8080", ""))
    m = fresh_host.spawn(cmd, "master")
    m.wait_log("MOONCAKE_MASTER_READY")


def test_run_the_example(fresh_host, tmp_path):
    r = fresh_host.sh(f"cd {tmp_path} && " + rl_command(), timeout=300)
    assert r.returncode == 0, r.output[-4000:]
    check_rl_run(r.output, str(tmp_path))


CLIENTS_PRELUDE = """
from mooncake.store import MooncakeDistributedStore
from mooncake.engine import last_error
class _Self: pass
self = _Self()
"""


def test_connecting_to_a_real_metadata_server(fresh_host, tmp_path):
    text = block(PAGE, 7, "erdma_0").text
    # As written: "rdma" on a host without an RDMA NIC
    script = CLIENTS_PRELUDE + text + textwrap.dedent("""
        print("HEALTH", self.rollout_client.health_check(), self.training_client.health_check())
        print("ERR", last_error())
    """)
    (tmp_path / "literal.py").write_text(script)
    r = fresh_host.sh(f"cd {tmp_path} && python literal.py")
    assert r.returncode == 0, r.output
    assert "HEALTH 1 1\n" in r.output  # neither client is set up
    nics = os.listdir("/sys/class/infiniband") if os.path.isdir("/sys/class/infiniband") else []
    if not nics:
        assert ('protocol "rdma": not supported on this host: it needs an RDMA NIC (InfiniBand or '
                "RoCE) and this host has none (/sys/class/infiniband lists none)") in r.output
    # Over tcp: both clients connect and the rollout client's data reaches the training one.
    tcp = substitute(text, ('"rdma",', '"tcp",'), ('"erdma_0",', '"",'), ('"erdma_1",', '"",'))
    script = CLIENTS_PRELUDE + tcp + textwrap.dedent("""
        import torch
        print("HEALTH", self.rollout_client.health_check(), self.training_client.health_check())
        value = {"obs": torch.arange(12, dtype=torch.int32).reshape(3, 4), "reward": torch.rand(3)}
        print("PUT", self.rollout_client.put_tensor("clients/0", value))
        got = self.training_client.get_tensor("clients/0")
        print("SAME", all(torch.equal(got[k], value[k]) for k in value))
        self.training_client.remove("clients/0", force=True)
        self.rollout_client.close(); self.training_client.close()
    """)
    (tmp_path / "tcp.py").write_text(script)
    r = fresh_host.sh(f"cd {tmp_path} && python tcp.py")
    assert r.returncode == 0, r.output
    assert "HEALTH 0 0\nPUT 0\nSAME True\n" in r.output, r.output


def test_data_flow_fragments(fresh_host, tmp_path):
    """Blocks 1, 2, 3, 8 and 9 run in one session with the objects of examples/rl_samples.py
    (RolloutManager, TrainGroup, ...): the names the fragments use are bound to them."""
    b1, b2, b3 = (block(PAGE, i).text for i in (1, 2, 3))
    b8, b9 = block(PAGE, 8, "str(rollout_id)").text, block(PAGE, 9, "run_id").text
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {EXAMPLES!r})
        import rl_samples
        args = rl_samples.parse_args(["--num_rollout=3", "--num_train_actor=2",
                                      "--num_rollout_actor=2", "--eval_interval=0",
                                      "--save_interval=0"])
        actor_model = rl_samples.TrainGroup(args)
        rollout_manager = rl_samples.RolloutManager(args)
        actor_model.init_actors(args)

        # block 1: inside RolloutController/RolloutManager
        class _Self: pass
        self = _Self()
        self.rollout_client = rollout_manager.controller.rollout_client
        self.training_client = actor_model.training_client
        self.actor_handlers = actor_model.actor_handlers
        rollout_id = 41
        rollout_samples = [e.generate(rollout_id) for e in rollout_manager.rollout_engines]
    """) + b1 + textwrap.dedent("""
        # block 2: inside TrainGroup.train
        rollout_key = str(rollout_id)
    """) + b2 + textwrap.dedent("""
        print("B2", rl_samples._digest(samples) == rl_samples._digest(rollout_samples))
        self.rollout_client.remove(rollout_key, force=True)
        # block 3: the training loop
        start, num_rollout = 0, 3
        seen = []
        _train = actor_model.train
        def _record(rid, key):
            seen.append((rid, key)); return _train(rid, key)
        actor_model.train = _record
    """) + b3 + textwrap.dedent("""
        print("B3", seen, all(rollout_manager.digests[i] == actor_model.digests[i] for i in range(3)))
        for rid, key in seen:
            rollout_manager.release(key)
        # block 8: the default key
        rollout_id = 7
    """) + b8 + textwrap.dedent("""
        print("B8", key, rl_samples._digest(self.training_client.get_tensor("7")) ==
              rl_samples._digest(rollout_samples))
        self.rollout_client.remove("7", force=True)
        # block 9: a structured key
        run_id = "exp1"
    """) + b9 + textwrap.dedent("""
        print("B9", key, self.rollout_client.put_tensor(key, rollout_samples),
              rl_samples._digest(self.training_client.get_tensor(key)) == rl_samples._digest(rollout_samples))
        self.rollout_client.remove(key, force=True)
        rollout_manager.close(); actor_model.close()
    """)
    (tmp_path / "fragments.py").write_text(script)
    r = fresh_host.sh(f"cd {tmp_path} && python fragments.py", timeout=180)
    assert r.returncode == 0, r.output[-4000:]
    lines = [ln for ln in r.output.splitlines() if ln[:2] in ("B2", "B3", "B8", "B9")]
    assert lines == ["B2 True", "B3 [(0, '0'), (1, '1'), (2, '2')] True", "B8 7 True",
                     "B9 run:exp1/rollout:7 0 True"], r.output[-3000:]


def test_the_master_with_its_own_metadata_server(fresh_host, tmp_path):
    """The other way to meet the prerequisites: no bootstrap_server.py, the master's own HTTP
    metadata server (block 5 exactly as written), then the example again."""
    for p in fresh_host.procs:
        if p.name in ("bootstrap_server", "master"):
            p.stop()
    text = block(PAGE, 5, "mooncake_master").text
    m = fresh_host.spawn(substitute(shell_command(text), ("./build/mooncake_master",
                                                          "exec mooncake_master")), "master_own")
    m.wait_log("MOONCAKE_MASTER_READY")
    fresh_host.wait_port(8080, m)
    r = fresh_host.sh(f"cd {tmp_path} && " + rl_command(), timeout=300)
    assert r.returncode == 0, r.output[-4000:]
    check_rl_run(r.output, str(tmp_path))


def test_self_contained_exchange_flags_still_work(tmp_path):
    """The example's other mode (README's), on this machine's free ports."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "rl_samples.py"), "--rollouts", "1",
                        "--trainers", "1", "--steps", "2", "--batch", "64"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trainer 0: trained on 2 batches" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "rl_samples.py"),
                        "--num_rollout=1", "--steps=2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert ("--num_rollout (the page's loop) and --steps (the self-contained exchange) cannot be "
            "combined") in r.stderr
