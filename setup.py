"""Builds and installs Mooncake in Go.

`pip install --no-build-isolation .` runs `go build -buildmode=c-shared ./capi` into
python/mooncake/libmooncake.so, the transfer seam python/mooncake/libmooncake_pg.so
(faultseam/build.sh), builds the four Go commands as one multi-call binary
python/mooncake/bin/mooncake (cmd/mooncake; the console scripts mooncake_master, mooncake_client,
transfer_engine_bench and mooncake_http_metadata_server exec it under their own names), and,
when torch is importable, the c10d shim `mooncake._pg_ext` against that torch (no second torch
download, hence --no-build-isolation), and the small C extension `mooncake._fast_copy`
(python/mooncake/_fast_copy.c: upstream's concat_arrays_into; needs only Python's headers), and
`mooncake._bytes_alloc` (python/mooncake/_bytes_alloc.c: the C allocator through which get and
get_batch read values into new bytes objects).

Go builds are stripped (-ldflags="-s -w": no symbol table, no DWARF) and the shim is compiled
without debug info, so a wheel (`pip wheel --no-build-isolation --no-deps .`) stays small. Set
MOONCAKE_DEBUG_BUILD=1 to keep the symbols and debug info (for gdb/delve/perf).
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(ROOT, "python", "mooncake")
# The multi-call binary (cmd/mooncake) the console scripts of python/mooncake/_cli.py exec.
MULTICALL = "mooncake"
DEBUG = os.environ.get("MOONCAKE_DEBUG_BUILD", "") not in ("", "0")


def go_flags(soname: str = ""):
    """go build's flags; soname: the shared library's DT_SONAME (LIB_SONAME)."""
    ld = ([] if DEBUG else ["-s", "-w"]) + ([f"-extldflags=-Wl,-soname,{soname}"] if soname else [])
    return ["-trimpath"] + (["-ldflags=" + " ".join(ld)] if ld else [])


# libmooncake.so's soname. A process that loaded a libmooncake.so from another path first
# (MOONCAKE_LIB) then satisfies the torch shim's and Rust's DT_NEEDED "libmooncake.so" with that
# very copy instead of loading the package's as well (two Go runtimes in one process).
LIB_SONAME = "libmooncake.so"


def go_build():
    """Builds libmooncake.so and the multi-call binary in the source tree (python/mooncake)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = dict(os.environ, CGO_ENABLED="1")
    subprocess.check_call([go, "build", *go_flags(LIB_SONAME), "-buildmode=c-shared",
                           "-o", os.path.join(PKG, "libmooncake.so"), "./capi"], cwd=ROOT, env=env)
    header = os.path.join(PKG, "libmooncake.h")
    if os.path.exists(header):
        os.remove(header)
    bindir = os.path.join(PKG, "bin")
    # Earlier builds put one binary per command here; only the multi-call one ships now.
    shutil.rmtree(bindir, ignore_errors=True)
    os.makedirs(bindir)
    subprocess.check_call([go, "build", *go_flags(), "-o", os.path.join(bindir, MULTICALL),
                           "./cmd/" + MULTICALL], cwd=ROOT, env=env)


def seam_build():
    """Builds python/mooncake/libmooncake_pg.so, the transfer-status seam the torch shim links
    (faultseam/mooncake_pg_seam.h; docs/elastic.md, "Fault injection seam")."""
    subprocess.check_call(["bash", os.path.join(ROOT, "faultseam", "build.sh"), PKG], cwd=ROOT)


class BuildPy(build_py):
    def run(self):
        go_build()
        seam_build()
        super().run()
        dst = os.path.join(self.build_lib, "mooncake")
        shutil.rmtree(os.path.join(dst, "bin"), ignore_errors=True)  # a stale build/ tree
        os.makedirs(os.path.join(dst, "bin"))
        shutil.copy2(os.path.join(PKG, "libmooncake.so"), dst)
        shutil.copy2(os.path.join(PKG, "libmooncake_pg.so"), dst)
        shutil.copy2(os.path.join(PKG, "bin", MULTICALL), os.path.join(dst, "bin", MULTICALL))


def torch_extension():
    """The c10d shim, when torch is installed (else the package works without mooncake.pg)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: building without the mooncake.pg shim", file=sys.stderr)
        return [], {}
    sys.path.insert(0, os.path.join(ROOT, "torchext"))
    import build as torchext_build  # torchext/build.py

    return torchext_build.ext_modules(), torchext_build.cmdclass()


def c_extension(module, source):
    """A small C extension of the package (needs only Python's headers)."""
    return Extension(module, sources=[source], extra_compile_args=["-O2"] + ([] if DEBUG else ["-g0"]))


ext_modules, cmdclass = torch_extension()
ext_modules = [
    c_extension("mooncake._fast_copy", "python/mooncake/_fast_copy.c"),  # lists of arrays into one address
    c_extension("mooncake._bytes_alloc", "python/mooncake/_bytes_alloc.c"),  # get's new bytes objects
] + list(ext_modules)
cmdclass = dict(cmdclass)
cmdclass["build_py"] = BuildPy

setup(
    package_dir={"": "python"},
    packages=["mooncake"],
    py_modules=["mooncake_pg"],
    package_data={"mooncake": ["libmooncake.so", "libmooncake_pg.so", "bin/*"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    zip_safe=False,
)
