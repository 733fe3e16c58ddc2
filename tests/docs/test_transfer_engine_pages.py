"""The transfer-engine design pages (docs/upstream/design__transfer-engine__*.md): the index and
the seven accelerator/specialised transport pages. Every code block is a test here (see
docs/docs-tests.md): the Python snippets run as written and, on a host without the hardware,
fail with an error naming what is missing; the CMake build lines have no counterpart (this build
is `go build`, with no hardware features to switch on: the engine's SUPPORT_* flags say so);
shell diagnostics run where their tools exist."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest

from .conftest import blocks, page_text, python, substitute

USE_TCP = '; use protocol "tcp" (TCP across hosts, shared memory within one)'
REGISTER_HOST = '; register host memory (location "cpu:N") and copy device data through it'
PAGE = "design__transfer-engine__{}_transport"


def gpus() -> list:
    from mooncake import _gpu

    try:
        n = _gpu.runtime().device_count()[0]
    except RuntimeError:
        n = 0
    return [f"cuda:{i}" for i in range(n)]


def rdma_nics() -> list:
    d = "/sys/class/infiniband"
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def host_story(proto: str) -> str:
    """The error initialize() leaves for ``proto`` on this host (engine/hardware.go's wording),
    from what this host has."""
    table = {
        "rdma": ("an RDMA NIC (InfiniBand or RoCE)", rdma_nics(), "/sys/class/infiniband lists none"),
        "barex": ("an RDMA NIC (InfiniBand or RoCE)", rdma_nics(), "/sys/class/infiniband lists none"),
        "nvlink": ("NVIDIA GPUs on a multi-node NVLink fabric (MNNVL)", gpus(),
                   "NVML (libnvidia-ml) finds no NVIDIA GPU"),
        "nvlink_intra": ("NVIDIA GPUs joined by NVLink", gpus(),
                         "NVML (libnvidia-ml) finds no NVIDIA GPU"),
        "hip": ("an AMD GPU with ROCm", ["/dev/kfd"] if os.path.exists("/dev/kfd") else [],
                "/dev/kfd is absent"),
        "cxl": ("a CXL memory device", sorted(os.listdir("/sys/bus/cxl/devices"))
                if os.path.isdir("/sys/bus/cxl/devices") else [], "/sys/bus/cxl/devices lists none"),
    }
    what, found, absent = table[proto]
    head = f'protocol "{proto}": not supported on this host: '
    if not found:
        return f"{head}it needs {what} and this host has none ({absent}){USE_TCP}"
    return (f"{head}this host has {what} ({', '.join(found)}), but this build has no {proto} "
            f"transport yet{USE_TCP}")


def run_snippet(code: str, epilogue: str = "") -> str:
    """Runs a page's snippet (then our checks) in a new interpreter; its output."""
    r = python(code + "\n" + epilogue)
    assert r.returncode == 0, r.output
    return r.output


INIT_CHECK = ("from mooncake.engine import last_error\n"
              "print('RC', te._h == 0)\nprint('ERR', last_error())\n")


def check_init_block(page: str, index: int, proto: str) -> None:
    b = blocks(page)[index]
    assert f'"{proto}"' in b.text and "te.initialize(" in b.text, b.text
    out = run_snippet(b.text, INIT_CHECK)
    assert "RC True\n" in out  # the engine did not start...
    assert f"ERR {host_story(proto)}\n" in out  # ...and says what this host lacks


# ------------------------------------------------------------------ the index


def test_index_lists_the_transport_pages_and_each_has_tests():
    text = page_text("design__transfer-engine__index")
    assert blocks("design__transfer-engine__index") == []  # a table of contents: no commands
    listed = re.findall(r"^(\w+_transport)$", text, re.M)
    assert listed == ["nvlink_transport", "nvlink_intra_transport", "hip_transport",
                      "cxl_transport", "barex_transport", "mlu_transport", "maca_transport"]
    here = open(__file__).read()
    for name in listed:
        assert os.path.exists(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                                            "upstream", f"design__transfer-engine__{name}.md"))
        assert f"def test_{name.replace('_transport', '')}_" in here, name


def test_build_flags_have_no_counterpart():
    """Every page's first block is a CMake configure line with a USE_* flag. This build has no
    CMake and no hardware features to switch on; the engine's feature flags are all False."""
    from mooncake import engine

    flags = {"hip": "USE_HIP", "nvlink": "USE_MNNVL", "nvlink_intra": "USE_INTRA_NVLINK",
             "cxl": "USE_CXL", "barex": "USE_BAREX", "maca": "USE_MACA", "mlu": "USE_MLU"}
    for page, flag in flags.items():
        first = blocks(PAGE.format(page))[0]
        assert first.text.startswith("cmake ..") and f"-D{flag}=ON" in first.text, (page, first.text)
    for name in ("SUPPORT_CUDA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_INTRA_NVLINK",
                 "SUPPORT_EFA", "SUPPORT_MUSA"):
        assert getattr(engine, name) is False


# ------------------------------------------------------------------ HIP


def test_hip_protocol_string():
    check_init_block(PAGE.format("hip"), 1, "hip")


def test_hip_memory_registration():
    """Blocks 1 and 2 in one session (block 2 uses TransferEngine from block 1)."""
    bs = blocks(PAGE.format("hip"))
    code = bs[1].text + bs[2].text
    assert "mooncake.allocate_gpu_memory(256 * 1024 * 1024, device=0)" in code
    checks = ("import traceback\n"
              "try:\n" + "".join("    " + ln + "\n" for ln in bs[2].text.splitlines()) +
              "except Exception as e:\n    print('RAISED', type(e).__name__, e)\n")
    out = run_snippet(bs[1].text, checks)
    if not gpus():
        # allocate_gpu_memory names what is missing (no driver, no GPU)
        assert re.search(r"^RAISED RuntimeError allocate_gpu_memory: no GPU here: .+$", out, re.M), out
    else:
        # the GPU memory exists, but the hip engine never started
        assert "RAISED RuntimeError TransferEngine is not initialized: call initialize() first" in out
    # With tcp (the substitution), GPU memory still cannot be registered: the transports copy
    # with the CPU; host memory can.
    tcp = substitute(bs[2].text, ('"hip"', '"tcp"'))
    probe = ("import ctypes\nfrom mooncake.engine import TransferEngine, last_error\n"
             "te = TransferEngine()\nassert te.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '') == 0\n"
             "host = ctypes.create_string_buffer(1 << 20)\n"
             "print('HOST', te.register_memory(ctypes.addressof(host), 1 << 20, 'cuda:0'), last_error())\n")
    out = run_snippet(probe)
    # The library also logs the failure on stderr (merged here; written before Python's stdout).
    log, host = out.splitlines()
    assert host.startswith('HOST -1 location "cuda:0": not supported on this host: registering '
                           "device memory: "), out
    assert host.endswith(REGISTER_HOST[2:]), out
    assert re.fullmatch(r"E\d{4} [\d:.]+ +\d+ engine\.go:\d+\] mc_engine_register: error -400: "
                        + re.escape(host[len("HOST -1 "):]), log), out
    if gpus():
        out = run_snippet("from mooncake.engine import TransferEngine, last_error\n" + tcp,
                          "print('RC', te.register_memory(buf, 256 * 1024 * 1024, 'cuda:0'))\n")
        assert "RC -1" in out


# ------------------------------------------------------------------ NVLink (MNNVL)


def test_nvlink_protocol_string():
    check_init_block(PAGE.format("nvlink"), 1, "nvlink")


def test_nvlink_transport_test_binary_is_not_shipped():
    b = blocks(PAGE.format("nvlink"))[2]
    assert b.text == "./build/mooncake-transfer-engine/tests/nvlink_transport_test\n"
    # Upstream's C++ test binary; ours are Go tests (go test ./engine/ -run Unsupported) and this
    # module. The page's own note: without MNNVL hardware the test skips.
    assert not os.path.exists("build/mooncake-transfer-engine/tests/nvlink_transport_test")


# ------------------------------------------------------------------ intra-node NVLink


def test_nvlink_intra_protocol_string():
    check_init_block(PAGE.format("nvlink_intra"), 1, "nvlink_intra")


# ------------------------------------------------------------------ CXL


def test_cxl_protocol_string():
    check_init_block(PAGE.format("cxl"), 1, "cxl")


def test_cxl_numa_node_lookup():
    b = blocks(PAGE.format("cxl"))[2]
    assert 'numactl -H | grep -A5 "node distances"' in b.text
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (Debian's numactl); a CXL host needs it anyway")
    r = subprocess.run(["bash", "-c", b.text], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "node distances" in r.stdout, r.stdout + r.stderr


def test_cxl_memory_registration():
    bs = blocks(PAGE.format("cxl"))
    # Literally (after block 1's cxl engine, which did not start): a clear error.
    out = run_snippet(bs[1].text, "try:\n" + "".join("    " + ln + "\n" for ln in bs[3].text.splitlines())
                      + "except RuntimeError as e:\n    print('RAISED', e)\n")
    assert "RAISED TransferEngine is not initialized: call initialize() first\n" in out
    # With tcp, the page's 256 MB buffer registers with its "cpu:2" tag and moves.
    code = substitute(bs[1].text, ('"cxl"', '"tcp"'), ('"localhost:12345"', '"127.0.0.1"'))
    code += substitute(bs[3].text, ("te.register_memory(", "REG = te.register_memory("))
    out = run_snippet(code, "print('REG', REG, te.get_first_buffer_address(te.get_segment_name())"
                            " == ctypes.addressof(buf))\n")
    assert "REG 0 True\n" in out, out


def test_cxl_troubleshooting_commands():
    b = blocks(PAGE.format("cxl"))[4]
    assert b.text == "ls /sys/bus/cxl/devices/\ndaxctl list\n"
    r = subprocess.run(["bash", "-c", "ls /sys/bus/cxl/devices/"], capture_output=True, text=True)
    if os.path.isdir("/sys/bus/cxl/devices"):
        assert r.returncode == 0
    else:  # no CXL bus on this host: what a user without the hardware sees
        assert r.returncode != 0 and "No such file or directory" in r.stderr
    b5 = blocks(PAGE.format("cxl"))[5]
    assert "/dev/dax0.0" in b5.text  # permissions of a CXL DAX device: needs the device
    if not os.path.exists("/dev/dax0.0"):
        r = subprocess.run(["bash", "-c", b5.text.replace("sudo ", "")], capture_output=True,
                           text=True)
        assert r.returncode != 0 and "/dev/dax0.0" in r.stderr


# ------------------------------------------------------------------ Barex


def test_barex_protocol_string():
    check_init_block(PAGE.format("barex"), 1, "barex")


# ------------------------------------------------------------------ MACA (MetaX)


def test_maca_protocol_string():
    check_init_block(PAGE.format("maca"), 3, "rdma")


def test_maca_memory_registration():
    bs = blocks(PAGE.format("maca"))
    # mc_malloc is the page's placeholder for MetaX's allocator: a NameError as written.
    r = python(bs[3].text + bs[4].text)
    assert r.returncode == 1 and "NameError: name 'mc_malloc' is not defined" in r.output
    # With a tcp engine and host memory standing in for mc_malloc: a "cuda:0" tag is device
    # memory, which this build refuses by name.
    code = substitute(bs[3].text, ('"rdma"', '"tcp"'), ('"mlx5_0"', '""'),
                      ('"node1:12345"', '"127.0.0.1"'))
    code += substitute(bs[4].text, ("mc_malloc(256 * 1024 * 1024)", "_host_buffer(256 * 1024 * 1024)"))
    pre = ("import ctypes\nfrom mooncake.engine import last_error\n_keep = []\n"
           "def _host_buffer(n):\n    b = ctypes.create_string_buffer(n)\n    _keep.append(b)\n"
           "    return ctypes.addressof(b)\n")
    out = run_snippet(pre + code, "print('ERR', last_error())\n")
    assert re.search(r'^ERR location "cuda:0": not supported on this host: registering device '
                     r"memory: .+$", out, re.M), out


def test_maca_environment_lines():
    bs = blocks(PAGE.format("maca"))
    for i in (5, 7):
        r = subprocess.run(["bash", "-c", bs[i].text + 'echo "$LD_LIBRARY_PATH"'],
                           capture_output=True, text=True, env={**os.environ, "MACA_HOME": "/opt/maca"})
        assert r.returncode == 0 and r.stdout.startswith("/opt/maca/lib:"), r.stdout
    # blocks 6 and 8 are error messages the page explains, not commands; 1, 2 and 9 are CMake
    assert bs[6].text.startswith("error while loading shared libraries")
    assert bs[8].text.startswith("CMake Error")
    assert "USE_MACA" in bs[2].text and "USE_MACA" in bs[9].text and "mcruntime" in bs[1].text
    assert not glob.glob("/opt/maca/lib/libmcruntime.so*")  # no MACA runtime on this host


# ------------------------------------------------------------------ MLU (Cambricon)


def test_mlu_protocol_string():
    check_init_block(PAGE.format("mlu"), 1, "rdma")


def test_mlu_memory_registration():
    bs = blocks(PAGE.format("mlu"))
    r = python(bs[1].text + bs[2].text)
    assert r.returncode == 1 and "NameError: name 'cnrt_malloc' is not defined" in r.output
    code = substitute(bs[1].text, ('"rdma"', '"tcp"'), ('"mlx5_0"', '""'),
                      ('"node1:12345"', '"127.0.0.1"'))
    code += substitute(bs[2].text, ("cnrt_malloc(256 * 1024 * 1024)", "_host_buffer(256 * 1024 * 1024)"))
    pre = ("import ctypes\nfrom mooncake.engine import last_error\n_keep = []\n"
           "def _host_buffer(n):\n    b = ctypes.create_string_buffer(n)\n    _keep.append(b)\n"
           "    return ctypes.addressof(b)\n")
    out = run_snippet(pre + code, "print('ERR', last_error())\n")
    if not glob.glob("/dev/cambricon_dev*"):
        assert ('ERR location "mlu:0": not supported on this host: registering device memory: '
                "it needs a Cambricon MLU and this host has none (there is no "
                f"/dev/cambricon_dev* device){REGISTER_HOST}\n") in out, out


def test_mlu_troubleshooting_commands():
    bs = blocks(PAGE.format("mlu"))
    assert bs[3].text.startswith("cnDrvMemExportToDmaBuf")  # an error message, not a command
    r = subprocess.run(["bash", "-c", bs[4].text], capture_output=True, text=True, timeout=30)
    if os.path.exists("/proc/config.gz"):  # grep: 0 with the DMA_BUF lines, 1 without them
        assert (r.returncode, "DMA_BUF" in r.stdout) in ((0, True), (1, False)), r.stdout + r.stderr
    else:
        assert r.returncode != 0
    r = subprocess.run(["bash", "-c", bs[5].text], capture_output=True, text=True, timeout=30)
    if shutil.which("cnrt-diagnose") is None:  # no Neuware SDK, no MLU: the shell says so
        assert "cnrt-diagnose: command not found" in r.stderr
