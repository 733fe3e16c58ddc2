"""Builds and installs Mooncake in Go.

`pip install --no-build-isolation .` runs `go build -buildmode=c-shared ./capi` into
python/mooncake/libmooncake.so, builds the Go commands into python/mooncake/bin/ (exposed as
console scripts), and, when torch is importable, the c10d shim `mooncake._pg_ext` against that
torch (no second torch download, hence --no-build-isolation).
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(ROOT, "python", "mooncake")
GO_COMMANDS = ["mooncake_master", "mooncake_client", "transfer_engine_bench",
               "mooncake_http_metadata_server"]


def go_build():
    """Builds libmooncake.so and the Go commands in the source tree (python/mooncake)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = dict(os.environ, CGO_ENABLED="1")
    subprocess.check_call([go, "build", "-trimpath", "-buildmode=c-shared",
                           "-o", os.path.join(PKG, "libmooncake.so"), "./capi"], cwd=ROOT, env=env)
    header = os.path.join(PKG, "libmooncake.h")
    if os.path.exists(header):
        os.remove(header)
    bindir = os.path.join(PKG, "bin")
    os.makedirs(bindir, exist_ok=True)
    for cmd in GO_COMMANDS:
        if os.path.isdir(os.path.join(ROOT, "cmd", cmd)):
            subprocess.check_call([go, "build", "-trimpath", "-o", os.path.join(bindir, cmd),
                                   "./cmd/" + cmd], cwd=ROOT, env=env)


class BuildPy(build_py):
    def run(self):
        go_build()
        super().run()
        dst = os.path.join(self.build_lib, "mooncake")
        os.makedirs(os.path.join(dst, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(PKG, "libmooncake.so"), dst)
        for cmd in os.listdir(os.path.join(PKG, "bin")):
            shutil.copy2(os.path.join(PKG, "bin", cmd), os.path.join(dst, "bin", cmd))


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


ext_modules, cmdclass = torch_extension()
cmdclass = dict(cmdclass)
cmdclass["build_py"] = BuildPy

setup(
    package_dir={"": "python"},
    packages=["mooncake"],
    py_modules=["mooncake_pg"],
    package_data={"mooncake": ["libmooncake.so", "bin/*"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    zip_safe=False,
)
