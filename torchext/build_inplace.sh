#!/usr/bin/env bash
# Builds mooncake._pg_ext in place into python/mooncake/ (for development and tests).
# Usage: torchext/build_inplace.sh [python]   (default: .venv/bin/python, else python3)
# Needs python/mooncake/libmooncake.so and libmooncake_pg.so; builds them when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ ! -f python/mooncake/libmooncake.so ] || [ ! -f python/mooncake/libmooncake_pg.so ]; then
  make lib # the Makefile's one build of both (with the library's soname)
fi
export MAX_JOBS=${MAX_JOBS:-2}
"$PY" - <<'PYEOF'
import os, sys, shutil, glob
sys.path.insert(0, "torchext")
import build as tb
from setuptools import Distribution
dist = Distribution({"name": "mooncake-pg-ext", "ext_modules": tb.ext_modules(), "cmdclass": tb.cmdclass()})
cmd = dist.get_command_obj("build_ext")
cmd.inplace = False
cmd.build_lib = "build/torchext-lib"
cmd.build_temp = "build/torchext-tmp"
dist.run_command("build_ext")
for f in glob.glob("build/torchext-lib/mooncake/_pg_ext*.so"):
    dst = os.path.join("python", "mooncake", os.path.basename(f))
    shutil.copy2(f, dst)
    print("built", dst)
PYEOF
