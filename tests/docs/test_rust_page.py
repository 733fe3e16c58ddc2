"""The Rust bindings page (docs/upstream/getting_started__rust-bindings.md): our crates are in
rust/ (rust/mooncake_store, rust/transfer_engine), built by cargo (no CMake). Commands run on a
fresh host (private network namespace) for the page's ports 8080 and 50051.

Substitutions (docs/docs-tests.md): upstream's paths (mooncake-store/rust, build/...,
mooncake-transfer-engine/rust/target/release) are rust/ and rust/target/debug; the CMake targets
are `cargo build`; the snippet's "node1"/10.0.0.1 are localhost and "rdma"/"mlx5_0" are "tcp"/""
(the literal "rdma" is run first: its error names the missing NIC); the page's step 8
(`remove(key, false)` right after `get`) fails with OBJECT_HAS_LEASE, upstream alike (the get holds
a 10 s lease): the test shows that, then runs it with force; the bench's --duration=10 is 1."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap

import pytest

from .conftest import ROOT, block, blocks, shell_command, substitute

PAGE = "getting_started__rust-bindings"
RUST = os.path.join(ROOT, "rust")
TARGET = os.path.join(RUST, "target")
EXAMPLES = os.path.join(ROOT, "examples")
LIB_DIR = os.path.join(ROOT, "python", "mooncake")
INC_DIR = os.path.join(ROOT, "capi", "include")
# A binary of a crate depending on ours finds libmooncake.so this way (docs/rust.md)
LD = {"LD_LIBRARY_PATH": LIB_DIR}


def cargo() -> str:
    c = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    if not os.path.exists(c):
        pytest.fail("cargo is not installed: `make setup` installs a Rust toolchain")
    return c


def run(cmd: str, cwd: str = RUST, timeout: float = 900, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["PATH"] = os.path.dirname(cargo()) + os.pathsep + e.get("PATH", "")
    e.update(env or {})
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def built():
    """rust/ built once (debug: the crates, examples and the bench), offline."""
    r = run(f"{cargo()} build --offline --examples --bins")
    assert r.returncode == 0, r.stderr[-4000:]
    return TARGET


@pytest.fixture(scope="module")
def services(fresh_host):
    """The page's services: bootstrap_server.py on 8080 and mooncake_master on 50051."""
    p = fresh_host.spawn(f"cd {EXAMPLES} && exec python bootstrap_server.py", "bootstrap_server")
    p.wait_log(r"HTTP metadata server ready at http://127\.0\.0\.1:8080/metadata")
    m = fresh_host.spawn("exec mooncake_master --rpc_port=50051", "master")
    m.wait_log("MOONCAKE_MASTER_READY")
    return fresh_host


def test_the_page_has_these_blocks():
    langs = [b.lang for b in blocks(PAGE)]
    assert langs == ["bash", "bash", "toml", "rust", "bash", "bash", "bash", "bash", "yaml"]
    for i, target in ((0, "build_mooncake_store_rust"), (5, "build_mooncake_store_rust"),
                      (6, "rust_transfer_engine_bench")):
        assert f"--target {target}" in blocks(PAGE)[i].text  # CMake targets: `cargo build` here


def test_build_with_env_vars(built):
    text = block(PAGE, 1, "MOONCAKE_STORE_LIB_DIR").text
    cmd = substitute(text, ("/path/to/build/mooncake-store", LIB_DIR),
                     ("/path/to/Mooncake/mooncake-store/include", INC_DIR),
                     ("cargo build", f"{cargo()} build --offline"))
    r = run(cmd)
    assert r.returncode == 0, r.stderr[-4000:]
    # a wrong directory is named in the build error
    r = run(f"MOONCAKE_STORE_LIB_DIR=/nonexistent {cargo()} build --offline -p mooncake_store")
    assert r.returncode != 0 and "MOONCAKE_STORE_LIB_DIR (/nonexistent)" in r.stderr


SNIPPET_MAIN = """
#[allow(unused_variables)]
fn page() -> Result<(), StoreError> {{
{body}
    Ok(())
}}

fn main() {{
    match page() {{
        Ok(()) => println!("PAGE OK"),
        Err(e) => {{ println!("PAGE ERR {{:?}}: {{}}", e, e); std::process::exit(1); }}
    }}
}}
"""


def snippet_crate(tmp_path, body: str) -> str:
    """A crate depending on ours as the page's Cargo.toml block says, with the snippet as main."""
    dep = block(PAGE, 2, "mooncake_store").text
    dep = substitute(dep, ("/path/to/Mooncake/mooncake-store/rust", os.path.join(RUST, "mooncake_store")))
    d = tmp_path / "page_snippet"
    (d / "src").mkdir(parents=True)
    (d / "Cargo.toml").write_text('[package]\nname = "page_snippet"\nversion = "0.1.0"\n'
                                  'edition = "2021"\n\n[workspace]\n\n'
                                  + dep.replace("# Cargo.toml\n", ""))
    shutil.copy(os.path.join(RUST, "Cargo.lock"), d / "Cargo.lock")  # the same dependency versions
    uses, rest = [], []
    for ln in body.splitlines():
        (uses if ln.startswith("use ") else rest).append(ln)
    (d / "src" / "main.rs").write_text("\n".join(uses) + SNIPPET_MAIN.format(
        body=textwrap.indent("\n".join(rest), "    ")))
    r = run(f"{cargo()} build --offline", cwd=str(d), env={"CARGO_TARGET_DIR": TARGET})
    assert r.returncode == 0, r.stderr[-4000:]
    return os.path.join(TARGET, "debug", "page_snippet")


def test_api_reference_snippet(services, built, tmp_path):
    body = block(PAGE, 3, "MooncakeStore::new()").text
    # the page's addresses on this fresh host
    body = substitute(body, ('"node1"', '"localhost"'),
                      ('"http://10.0.0.1:8080/metadata"', '"http://localhost:8080/metadata"'),
                      ('"10.0.0.1:50051"', '"localhost:50051"'))
    # As written ("rdma", "mlx5_0"): setup fails, naming the missing NIC
    exe = snippet_crate(tmp_path / "rdma", body)
    r = services.sh(exe, timeout=120, env=LD)
    assert r.returncode == 1, r.output
    nics = os.listdir("/sys/class/infiniband") if os.path.isdir("/sys/class/infiniband") else []
    if not nics:
        assert re.search(r'^PAGE ERR SetupError\(.*protocol \\?"rdma\\?": not supported on this '
                         r"host: it needs an RDMA NIC \(InfiniBand or RoCE\) and this host has none",
                         r.output, re.M), r.output
    # Over tcp, with a second client's segment for replica_num 2 (the Python store client)
    tcp = substitute(body, ('"rdma",', '"tcp",'), ('"mlx5_0",', '"",'))
    helper = services.spawn(
        "exec python -c \"from mooncake.store import MooncakeDistributedStore as S; import time; "
        "s = S(); assert s.setup('localhost', 'http://localhost:8080/metadata', 64 << 20, "
        "16 << 20, 'tcp', '', 'localhost:50051') == 0; print('SEGMENT UP', flush=True); "
        "time.sleep(3600)\"", "second_segment")
    helper.wait_log("SEGMENT UP")
    exe = snippet_crate(tmp_path / "tcp", tcp)
    r = services.sh(exe, timeout=120, env=LD)
    # step 8, remove("my-key", false) right after get("my-key"): the get's lease holds it
    assert r.returncode == 1 and "PAGE ERR OperationFailed(-706)" in r.output, r.output
    forced = substitute(tcp, ('store.remove("my-key", /*force=*/false)?;',
                              'store.remove("my-key", /*force=*/true)?;'))
    # the first run stored both keys already (puts are write-once): start from a clean store
    services.sh("python -c \"from mooncake.store import MooncakeDistributedStore as S; s = S(); "
                "s.setup('localhost', 'P2PHANDSHAKE', 0, 16 << 20, 'tcp', '', 'localhost:50051'); "
                "print(s.remove_all())\"", timeout=60)
    exe = snippet_crate(tmp_path / "forced", forced)
    r = services.sh(exe, timeout=120, env=LD)
    assert r.returncode == 0 and r.output.strip().endswith("PAGE OK"), r.output
    helper.stop()


def test_running_the_example(fresh_host, built):
    text = block(PAGE, 4, "basic_usage").text
    lines = text.splitlines()
    assert lines[1] == "cd mooncake-transfer-engine/example/http-metadata-server-python"
    # the page's master also serves metadata on 8080, where bootstrap_server.py already is:
    master = shell_command("\n".join(lines[5:9]))
    assert master.startswith("./build/mooncake_master --enable_http_metadata_server=true")
    for p in fresh_host.procs:
        if p.name in ("master", "bootstrap_server") and p.alive():
            p.stop()
    fresh_host.spawn(f"cd {EXAMPLES} && exec python bootstrap_server.py", "bootstrap2").wait_log("ready")
    lit = fresh_host.spawn("exec " + substitute(master.rstrip(" &"), ("./build/mooncake_master",
                                                                       "mooncake_master")), "m_lit")
    assert lit.wait(60) != 0 and "address already in use" in lit.log()
    m = fresh_host.spawn("exec mooncake_master --rpc_port=50051", "m_example")
    m.wait_log("MOONCAKE_MASTER_READY")
    run_line = shell_command("\n".join(lines[11:]))
    assert run_line == ("cd build\ncargo run --example basic_usage --manifest-path "
                        "../mooncake-store/rust/Cargo.toml")
    cmd = f"cd {RUST} && {cargo()} run --offline --example basic_usage --manifest-path " \
          f"{RUST}/mooncake_store/Cargo.toml"
    r = fresh_host.sh(cmd, timeout=600)
    assert r.returncode == 0 and "basic_usage: put, get (16 bytes), is_exist, get_size, remove: ok" \
        in r.output, r.output[-3000:]
    # "Or via CMake": the built example binary
    b5 = block(PAGE, 5, "basic_usage").text
    assert "./mooncake-store/rust/target/debug/examples/basic_usage" in b5
    r = fresh_host.sh(os.path.join(TARGET, "debug", "examples", "basic_usage"), timeout=120)
    assert r.returncode == 0 and "remove: ok" in r.output, r.output
    m.stop()


def test_transfer_engine_bench(fresh_host, built):
    text = block(PAGE, 7, "--mode=target").text
    bench = os.path.join(TARGET, "debug", "transfer_engine_bench")
    target_cmd, init_cmd = (shell_command(part) for part in text.split("\n\n"))
    target_cmd = substitute(target_cmd, ("./build/mooncake-transfer-engine/rust/target/release/"
                                         "transfer_engine_bench", bench))
    # As written (rdma): the target exits naming the missing NIC
    r = fresh_host.sh(target_cmd, timeout=60)
    assert r.returncode != 0 and 'protocol "rdma": not supported on this host' in r.output, r.output
    t = fresh_host.spawn("exec " + substitute(target_cmd, ("--protocol=rdma", "--protocol=tcp")),
                         "bench_target")
    seg = t.wait_log(r"^READY (\S+)$").group(1)
    init_cmd = substitute(init_cmd, ("./build/mooncake-transfer-engine/rust/target/release/"
                                     "transfer_engine_bench", bench),
                          ("--protocol=rdma", "--protocol=tcp"),
                          ("--segment_id=<target>:<port>", f"--segment_id={seg}"),
                          ("--duration=10", "--duration=1"))
    r = fresh_host.sh(init_cmd, timeout=120)
    assert r.returncode == 0, r.output
    assert re.search(r"^Test completed: duration \d+\.\d+, batch count \d+, transport (shm|tcp), "
                     r"throughput \d+\.\d+ GB/s$", r.output, re.M), r.output
    t.stop()


def test_ci_cargo_check(built):
    text = block(PAGE, 8, "cargo check").text
    steps = re.search(r"- run: \|\n(.*)", text, re.S).group(1)
    cmd = substitute(textwrap.dedent(steps),
                     ("$BUILD_DIR/mooncake-store", LIB_DIR),
                     ("$SRC_DIR/mooncake-store/include", INC_DIR),
                     ("cargo check --manifest-path mooncake-store/rust/Cargo.toml",
                      f"{cargo()} check --offline --manifest-path {RUST}/mooncake_store/Cargo.toml"))
    r = run(cmd, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
