"""docs/upstream/getting_started__examples__mooncake-pg-usage.md and design__mooncake-pg.md:
every Python snippet under torchrun, as written where this CPU machine can run it, with the
documented CPU substitution (docs/docs-tests.md) where it needs a GPU, and the literal GPU
snippet asserting the clear error this machine gives.

None of the snippets except the elastic one imports mooncake_pg: the "mooncake" and
"mooncake-cpu" backends come from torch's device-backend autoload (the package's
``torch.backends`` entry point).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from .conftest import HERE, block, blocks, page_text, python, substitute, venv_env

USAGE = "getting_started__examples__mooncake-pg-usage"
DESIGN = "design__mooncake-pg"
RUNNER = os.path.join(HERE, "pg_snippets_runner.py")

# The CPU substitution of the GPU snippets: the CPU backend and CPU tensors.
CPU = (('backend="mooncake"', 'backend="mooncake-cpu"'),
       ('device = torch.device(f"cuda:{rank}")', 'device = torch.device("cpu")'))

# The elastic snippet: the group gets room to grow to 16 ranks (upstream sizes a group's rank
# slots at creation, max_group_size, default the group size: the page never sets it), on the
# CPU backend; the results are printed.
ELASTIC_SUBST = (
    ('dist.init_process_group(backend="mooncake", init_method="env://")',
     'dist.init_process_group(backend="mooncake-cpu", init_method="env://",\n'
     '                        pg_options=mooncake_pg.MooncakeBackendOptions(max_group_size=16))'),
    ("mooncake_pg.extend_group_size_to(pg, new_size=16)",
     "extended = mooncake_pg.extend_group_size_to(pg, new_size=16)"),
    ("mooncake_pg.recover_ranks(pg, [5])", "recovered = mooncake_pg.recover_ranks(pg, [5])"),
)
ELASTIC_REPORT = """
print("ACTIVE", active.dtype, active.tolist())
print("SYNCED", n_synced)
print("EXTENDED", extended.status.name, sorted(extended.dropped_ranks))
print("STATES", states)
print("RECOVERED", recovered.status.name, recovered.reject_reason)
print("WORLD", dist.get_world_size())
"""


def snippets():
    b = {i: block(USAGE, i).text for i in (2, 3, 4, 5, 6, 7, 10)}
    return [
        # Block 3 first: no mooncake import has happened in the process yet.
        ["init-literal", b[3]],
        ["allreduce-literal", b[4]],
        ["p2p-literal", b[5]],
        ["p2p-cpu", substitute(b[5], *CPU)],
        ["alltoall-literal", b[6]],
        ["alltoall-cpu", substitute(b[6], *CPU)],
        ["batch-literal", b[7]],
        ["batch-cpu", substitute(b[7], *CPU)],
        ["elastic-literal", b[10]],
        ["elastic-cpu", substitute(b[10], *ELASTIC_SUBST) + ELASTIC_REPORT],
        ["import-check", b[2]],
    ]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The snippets, run by 2 ranks of one torchrun job; {name: [rank 0's section, rank 1's]}."""
    d = tmp_path_factory.mktemp("pg-snippets")
    spec = d / "snippets.json"
    spec.write_text(json.dumps(snippets()))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node=2", RUNNER, str(spec), str(d)],
                       env=venv_env({"MOONCAKE_PG_COLLECTIVE_TIMEOUT_US": "60000000"}),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-6000:]
    out = {}
    for rank in (0, 1):
        text = (d / f"rank{rank}.txt").read_text()
        for m in re.finditer(r"^=== BEGIN (\S+)\n(.*?)^=== END \1\n", text, re.M | re.S):
            out.setdefault(m.group(1), []).append(m.group(2))
    assert sorted(out) == sorted(n for n, _ in snippets()) and all(len(v) == 2 for v in out.values()), out
    return out


def ok(job, name):
    for rank, sec in enumerate(job[name]):
        assert f"=== OK {name}\n" in sec, f"rank {rank}:\n{sec}"
    return job[name]


NO_GPU = "RuntimeError: Found no NVIDIA driver on your system"


def no_gpu_error(job, name):
    """A GPU snippet on this machine: each rank stops at its first CUDA tensor with torch's
    clear error (after init_process_group(backend="mooncake") itself worked)."""
    for rank, sec in enumerate(job[name]):
        assert f"=== ERROR {name}: {NO_GPU}" in sec, f"rank {rank}:\n{sec}"


def test_init_without_import_uses_the_entry_point(job):
    """Block 3 as written (backend="mooncake", no import mooncake_pg): the group comes up; the
    backend was registered by the autoload hook without loading the library."""
    secs = ok(job, "init-literal")
    for rank, sec in enumerate(secs):
        assert f"=== LOADED init-literal False\n" in sec
        assert f"[rank {rank}/2] process group initialized\n" in sec, sec


def test_allreduce_literal_needs_a_gpu(job):
    no_gpu_error(job, "allreduce-literal")


def test_p2p(job):
    """Block 5: literal (GPU: clear error); on CPU rank 1 receives arange(N), tensor[0] = 0."""
    no_gpu_error(job, "p2p-literal")
    r0, r1 = ok(job, "p2p-cpu")
    assert "[rank 0] sent tensor\n" in r0
    assert "[rank 1] received tensor[0]=0.0\n" in r1


def test_all_to_all(job):
    """Block 6: all_to_all_single of a (world*128, 4096) tensor."""
    no_gpu_error(job, "alltoall-literal")
    for rank, sec in enumerate(ok(job, "alltoall-cpu")):
        assert f"[rank {rank}] all_to_all complete, output shape=torch.Size([256, 4096])\n" in sec


def test_batch_isend_irecv(job):
    """Block 7: each rank sends ones*rank to its peer and receives the peer's."""
    no_gpu_error(job, "batch-literal")
    r0, r1 = ok(job, "batch-cpu")
    assert "[rank 0] received from 1: 1.0\n" in r0
    assert "[rank 1] received from 0: 0.0\n" in r1


def test_elastic_as_written_says_how_to_make_room(job):
    """Block 10 as written: the group was created without max_group_size (2 rank slots), so
    extend_group_size_to(pg, new_size=16) cannot grow it: a ValueError says how to create it."""
    for rank, sec in enumerate(job["elastic-literal"]):
        assert ("=== ERROR elastic-literal: ValueError: mooncake: extend_group_size_to: the group "
                "has 2 rank slots (max_group_size), so it cannot grow to 16 ranks; create it with "
                "room to grow: dist.init_process_group(..., pg_options=mooncake_pg."
                "MooncakeBackendOptions(max_group_size=16))\n") in sec, sec


def test_elastic_with_room_to_grow(job):
    """Block 10 with max_group_size=16 (upstream's keyword and default): every call runs. No
    process stands in slots 2-15, so extending drops them all (Rejected: nothing to admit),
    their peer state is False, and recovering rank 5 is rejected with the reason."""
    for rank, sec in enumerate(ok(job, "elastic-cpu")):
        assert "ACTIVE torch.int32 [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\n" in sec, sec
        assert "SYNCED 2\n" in sec, sec
        m = re.search(r"^EXTENDED (\w+) (.*)$", sec, re.M)
        assert m and m.group(1) == "Rejected", sec
        assert "STATES [False, False, False]\n" in sec, sec
        m = re.search(r"^RECOVERED (\w+) (.*)$", sec, re.M)
        assert m and m.group(1) == "Rejected" and "5" in m.group(2), sec
        assert "WORLD 2\n" in sec, sec


def test_import_check(job):
    """Block 2 (`import mooncake_pg` "no error = installed correctly")."""
    ok(job, "import-check")


def test_allreduce_with_the_pages_launch_command(fresh_host, tmp_path):
    """Block 4 on CPU, launched by block 8's first command as written (4 processes,
    --master_addr=127.0.0.1 --master_port=29500, your_script.py) on a fresh host. The page's
    comment says tensor[0] is 6144 with 4 ranks; it is 0+1+2+3 = 6 (the comment multiplies by
    the tensor's length)."""
    script = substitute(block(USAGE, 4).text, *CPU)
    (tmp_path / "your_script.py").write_text(script)
    launch = block(USAGE, 8, "--nproc_per_node=4").text.split("\n\n")[0]
    assert launch.startswith("# 4 GPUs on 1 node\n")
    cmd = re.sub(r"\\\n\s*", "", launch.split("\n", 1)[1]).strip()
    assert cmd == ("torchrun --nproc_per_node=4 --master_addr=127.0.0.1 --master_port=29500 "
                   "your_script.py"), cmd
    r = fresh_host.sh(cmd, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.output[-6000:]
    for rank in range(4):
        assert f"[rank {rank}] allreduce result[0] = 6.0\n" in r.output, r.output[-4000:]


def test_autoload_off_leaves_the_backends_unknown():
    """TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns torch's autoload (and so our hook) off: without
    `import mooncake_pg` the backend is unknown, as torch documents."""
    code = ("import torch.distributed as dist, torch\n"
            "store = dist.HashStore()\n"
            "try:\n"
            "    dist.init_process_group('mooncake-cpu', store=store, rank=0, world_size=1)\n"
            "except Exception as e:\n"
            "    print('ERROR', e)\n")
    r = python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).check()
    assert "ERROR Unknown backend type mooncake-cpu" in r.output, r.output


def test_design_page_elastic_api_names():
    """The design page's elastic table (getActiveRanks, ...): each C++ name has its Python
    function in mooncake_pg (snake_case), as upstream binds them."""
    names = re.findall(r"^\| `(\w+)\(", page_text(DESIGN), re.M)
    assert names == ["getActiveRanks", "getNumSyncedRanks", "extendGroupSizeTo", "getPeerState",
                     "recoverRanks", "getPreferredHca"], names
    snake = [re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), n) for n in names]
    code = ("import mooncake_pg\n"
            f"print('MISSING', [n for n in {snake!r} if not callable(getattr(mooncake_pg, n, None))])\n")
    r = python(code).check()
    assert "MISSING []" in r.output, r.output


def test_every_block_is_covered():
    assert [b.lang for b in blocks(USAGE)] == ["bash", "bash", "python", "python", "python",
                                               "python", "python", "python", "bash", "bash",
                                               "python"]
    assert [b.lang for b in blocks(DESIGN)] == ["", "bash", "bash"]
