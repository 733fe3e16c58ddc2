"""Build description of the torch shim (extension module ``mooncake._pg_ext``).

setup.py imports this file when torch is importable::

    sys.path.insert(0, "torchext"); import build as torchext_build
    setup(..., ext_modules=torchext_build.ext_modules(), cmdclass=torchext_build.cmdclass())

The extension links python/mooncake/libmooncake.so and python/mooncake/libmooncake_pg.so (the
transfer seam; both built first, by setup.py or ``make lib``) and finds them at run time next to itself (rpath $ORIGIN). It is compiled against the torch in the environment (use
``pip install --no-build-isolation``) and records that torch version; mooncake.pg refuses to load
it under another torch with an ImportError that says to reinstall.

CUDA staging support is compiled in when the installed torch is a CUDA build and the CUDA headers
are found (CUDA_HOME, or the nvidia-*-cu* wheels torch depends on); no GPU or nvcc is needed.

How it links (docs/cuda.md, "The crash on the H200"): with torch.utils.cpp_extension's flags, plus
-fvisibility=hidden and a version script (torchext/pg_ext.map) that exports only PyInit__pg_ext,
and libstdc++ as the first library the shim needs. torch's wheels carry copies of some libstdc++
functions (GCC toolset's libstdc++_nonshared, linked into libc10.so, libtorch_cpu.so, ...) and
export them; the dynamic linker searches a library's needed libraries in order, so with
libmooncake, libc10 and libtorch_cpu listed before libstdc++ those copies answer the shim's
std:: references whenever libstdc++ is not already in the process's global scope (torch 2.11 with
CUDA 13.0's libcudart, which does not need libstdc++). Listing libstdc++ first binds them to
libstdc++ itself. `LINK_FACTS` names these choices; scripts/stdcxx_probe.py shows the result.
"""

from __future__ import annotations

import glob
import os
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "torchext")
SOURCES = [
    "mooncake_backend.cpp",
    "store_bridge.cpp",
    "work.cpp",
    "op.cpp",
    "op_checks.cpp",
    "threads.cpp",
    "cuda.cpp",
    "ipc_path.cpp",
    "ipc_cuda.cpp",
    "ipc_fake.cpp",
    "collectives.cpp",
    "p2p.cpp",
    "module.cpp",
]


# Compile flags added to torch.utils.cpp_extension's own (-fPIC, -std=c++17/20, the
# TORCH_EXTENSION_NAME and ABI defines).
COMPILE_ARGS = ["-O2", "-Wno-unused-parameter", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
VERSION_SCRIPT = os.path.join(HERE, "pg_ext.map")
# What the checks and scripts/gpu_check.sh report about the link (a docs/cuda.md section each).
LINK_FACTS = {
    "visibility": "hidden (-fvisibility=hidden -fvisibility-inlines-hidden)",
    "exports": "PyInit__pg_ext only (version script torchext/pg_ext.map)",
    "first_needed": "libstdc++.so.6",
}


def link_args() -> list[str]:
    return ["-Wl,-rpath,$ORIGIN", "-Wl,--version-script=" + VERSION_SCRIPT]


def _rel(p: str) -> str:
    # setuptools wants paths relative to setup.py's directory.
    return os.path.relpath(p, ROOT)


def cuda_include_dirs() -> list[str]:
    """Directories holding cuda_runtime_api.h and cuda.h, or [] when none is found."""
    import torch

    if torch.version.cuda is None or os.environ.get("MOONCAKE_PG_NO_CUDA"):
        return []
    cands = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            cands.append(os.path.join(os.environ[env], "include"))
    cands.append("/usr/local/cuda/include")
    purelib = sysconfig.get_paths()["purelib"]
    site_dirs = {purelib, os.path.dirname(os.path.dirname(torch.__file__))}
    for sp in site_dirs:
        cands += sorted(glob.glob(os.path.join(sp, "nvidia", "cu*", "include")), reverse=True)
        cands += [os.path.join(sp, "nvidia", "cuda_runtime", "include")]
    cands += [os.path.join(sp, "triton", "backends", "nvidia", "include") for sp in site_dirs]
    has = lambda d, f: os.path.isfile(os.path.join(d, f))
    main = next((c for c in cands if has(c, "cuda_runtime_api.h") and has(c, "cuda.h")), None)
    if main is None:
        return []
    if has(main, os.path.join("crt", "host_defines.h")):
        return [main]
    # The nvidia-cuda-runtime wheel ships without crt/ (it belongs to nvcc); borrow it from
    # another CUDA include directory (a toolkit, or triton's bundled headers).
    crt = next((c for c in cands if has(c, os.path.join("crt", "host_defines.h"))), None)
    return [main, crt] if crt else []


def ext_modules(relative: bool = True):
    import torch
    from torch.utils.cpp_extension import CppExtension

    fix = _rel if relative else (lambda p: p)
    debug = os.environ.get("MOONCAKE_DEBUG_BUILD", "") not in ("", "0")
    define_macros = [("MOONCAKE_TORCH_VERSION", '"%s"' % torch.__version__)]
    include_dirs = [os.path.join(ROOT, "capi", "include"), os.path.join(ROOT, "faultseam"), HERE]
    # libstdc++ first: see the module docstring. libmooncake_pg: the transfer seam (faultseam/).
    libraries = ["stdc++", "mooncake", "mooncake_pg"]
    cuda_inc = cuda_include_dirs()
    if cuda_inc:
        define_macros.append(("MOONCAKE_WITH_CUDA", "1"))
        include_dirs += cuda_inc
        libraries += ["c10_cuda", "torch_cuda"]
    return [
        CppExtension(
            name="mooncake._pg_ext",
            sources=[fix(os.path.join(HERE, s)) for s in SOURCES],
            include_dirs=include_dirs,
            define_macros=define_macros,
            library_dirs=[os.path.join(ROOT, "python", "mooncake")],
            libraries=libraries,
            # No debug info and a stripped link (the shim is 17 MB with -g, under 1 MB without);
            # MOONCAKE_DEBUG_BUILD=1 keeps them.
            extra_compile_args=COMPILE_ARGS + ([] if debug else ["-g0"]),
            extra_link_args=link_args() + ([] if debug else ["-s"]),
        )
    ]


def cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    return {"build_ext": BuildExtension.with_options(no_python_abi_suffix=False)}
