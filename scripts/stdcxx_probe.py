#!/usr/bin/env python3
"""Where the torch shim's C++ library symbols come from, in a process like a user's.

    python scripts/stdcxx_probe.py [--json FILE] [--strict]

Runs child processes of this Python (torch, CUDA when there is a GPU, mooncake.pg) and reports:
- the string ABI of torch and of the shim (torch._C._GLIBCXX_USE_CXX11_ABI, _pg_ext.BUILD_INFO)
  and the compiler and C++ headers the shim was built with;
- the shim's link: its needed libraries in order and how many symbols it exports;
- which libstdc++.so.6 the process maps, and which other loaded libraries export symbols that
  libstdc++ also exports (copies of libstdc++ code: torch's libs carry GCC toolset's
  libstdc++_nonshared, libcufile a static libstdc++), naming the locale and stream ones;
- the global scope (LD_DEBUG=scopes) and every binding of a shim reference to a libstdc++ symbol
  that lands outside libstdc++ (LD_DEBUG=bindings with LD_BIND_NOW=1);
- the formatting probe: _pg_ext._format_probe(12345), an int and a double through an
  ostringstream built in the shim, the path that crashed on the H200 (docs/cuda.md), in a child
  so a crash is reported rather than suffered.

--strict exits 1 when the probe fails or a shim reference to libstdc++ binds elsewhere.
Needs nm and readelf (binutils) for the symbol tables; without them those parts say so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys
import torch
cuda = torch.cuda.is_available()
if cuda:
    torch.cuda.init(); torch.zeros(1, device="cuda")
import mooncake.pg as mpg
ext = mpg._pg_ext
out = {"cuda": cuda, "shim": ext.__file__,
       "maps": sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]})}
probe = getattr(ext, "_format_probe", None)  # builds before this script have none
out["probe"] = probe(12345) if probe else "no _format_probe in this build"
print("PROBE-JSON " + json.dumps(out))
"""
EXPECT = "n=12345 x=6172.5"
LOCALE_RE = re.compile(r"locale|facet|num_put|num_get|_M_insert|codecvt|ctype|ios_base|basic_ios|"
                       r"stringstream|stringbuf|ostream")
BIND_RE = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'")


def run_child(env_extra: dict, timeout: int = 300) -> dict:
    env = dict(os.environ, **env_extra)
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=timeout)
    res = {"rc": p.returncode, "stderr_tail": p.stderr[-2000:]}
    for line in p.stdout.splitlines():
        if line.startswith("PROBE-JSON "):
            res.update(json.loads(line[len("PROBE-JSON "):]))
    return res


def dyn_defined(path: str) -> set[str]:
    p = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True)
    return {ln.split()[-1].split("@")[0] for ln in p.stdout.splitlines() if len(ln.split()) >= 3}


def needed(path: str) -> list[str]:
    p = subprocess.run(["readelf", "-d", path], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout)


def demangle(names: list[str]) -> list[str]:
    if not names or not shutil.which("c++filt"):
        return names
    p = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return p.stdout.splitlines()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="")
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()
    import torch

    rep: dict = {"python": sys.version.split()[0], "torch": torch.__version__,
                 "torch_cuda": torch.version.cuda,
                 "torch_cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI)}
    import mooncake.pg as mpg

    ext = mpg._pg_ext
    rep["shim_build"] = dict(getattr(ext, "BUILD_INFO", {}))
    have_binutils = bool(shutil.which("nm") and shutil.which("readelf"))
    if have_binutils:
        rep["shim_needed"] = needed(ext.__file__)
        rep["shim_exports"] = sorted(dyn_defined(ext.__file__))
    print(f"python {rep['python']}  torch {rep['torch']} (CUDA {rep['torch_cuda']})  "
          f"torch _GLIBCXX_USE_CXX11_ABI={rep['torch_cxx11_abi']}")
    b = rep["shim_build"]
    print(f"shim: built by {b.get('compiler')}, libstdc++ headers {b.get('glibcxx_release')} "
          f"({b.get('glibcxx_date')}), _GLIBCXX_USE_CXX11_ABI={b.get('glibcxx_use_cxx11_abi')}, "
          f"__cplusplus={b.get('cplusplus')}")
    if rep["shim_build"].get("glibcxx_use_cxx11_abi") not in (None, rep["torch_cxx11_abi"]):
        print("  ABI MISMATCH between torch and the shim")
    if have_binutils:
        print(f"shim needs (in order): {' '.join(rep['shim_needed'])}")
        print(f"shim exports {len(rep['shim_exports'])} symbols: {' '.join(rep['shim_exports'][:8])}")
    else:
        print("no nm/readelf here: symbol tables skipped")

    # 1. the formatting probe, plainly
    plain = run_child({})
    rep["probe"] = {"rc": plain["rc"], "out": plain.get("probe"), "cuda": plain.get("cuda")}
    ok = plain["rc"] == 0 and plain.get("probe") == EXPECT
    print(f"format probe (cuda initialised: {plain.get('cuda')}): rc={plain['rc']} "
          f"got {plain.get('probe')!r} want {EXPECT!r} -> {'OK' if ok else 'FAILED'}")
    if not ok:
        print(plain["stderr_tail"])

    # 2. scopes and bindings
    foreign = []
    with tempfile.TemporaryDirectory() as d:
        dbg = run_child({"LD_DEBUG": "scopes,bindings", "LD_BIND_NOW": "1",
                         "LD_DEBUG_OUTPUT": os.path.join(d, "ld")})
        text = ""
        for f in os.listdir(d):
            with open(os.path.join(d, f), errors="replace") as fh:
                text += fh.read()
    maps = dbg.get("maps", plain.get("maps", []))
    stdcxx = next((m for m in maps if os.path.basename(m).startswith("libstdc++.so")), "")
    rep["libstdcxx"] = os.path.realpath(stdcxx) if stdcxx else ""
    rep["global_scope"] = [os.path.basename(x) for x in re.findall(r"add (\S+) \[\d+\] to global scope", text)]
    print(f"libstdc++ mapped: {rep['libstdcxx']}")
    print(f"global scope additions (RTLD_GLOBAL), in order: {' '.join(rep['global_scope'])}")
    print(f"  libstdc++ in the global scope: {any(x.startswith('libstdc++') for x in rep['global_scope'])}")
    if have_binutils and stdcxx:
        std_syms = dyn_defined(stdcxx)
        exporters = []
        for m in maps:
            if m == stdcxx or not os.path.exists(m):
                continue
            common = sorted(dyn_defined(m) & std_syms)
            if common:
                loc = [s for s in demangle(common) if LOCALE_RE.search(s)]
                exporters.append({"lib": m, "count": len(common), "locale_stream": loc})
        rep["exporters"] = exporters
        print("loaded libraries exporting libstdc++ symbols (count; locale/stream ones):")
        for e in sorted(exporters, key=lambda e: -e["count"]):
            print(f"  {e['count']:5d} {os.path.basename(e['lib'])}: {'; '.join(e['locale_stream'][:4])}")
        shim = os.path.basename(ext.__file__)
        seen = set()
        for src, dst, sym in BIND_RE.findall(text):
            if os.path.basename(src) == shim and sym in std_syms and "libstdc++" not in dst:
                if (dst, sym) not in seen:
                    seen.add((dst, sym))
                    foreign.append({"to": os.path.basename(dst), "symbol": sym})
        rep["shim_foreign_bindings"] = foreign
        names = demangle([f["symbol"] for f in foreign])
        print(f"shim references to libstdc++ symbols bound outside libstdc++: {len(foreign)}")
        for f, n in zip(foreign, names):
            print(f"  -> {f['to']}: {n}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rep, fh, indent=1)
    bad = (not ok) or bool(foreign)
    return 1 if (args.strict and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
