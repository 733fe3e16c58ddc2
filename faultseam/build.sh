#!/usr/bin/env bash
# Builds libmooncake_pg.so (the transfer-status seam, mooncake_pg_seam.h) into OUT_DIR.
# Usage: faultseam/build.sh OUT_DIR    (compiler: $CXX, else c++)
# Not -Bsymbolic and default visibility: seam_check.cpp calls the three methods of
# transfer_seam.cpp through the PLT, so an LD_PRELOADed definition takes the calls.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: faultseam/build.sh OUT_DIR}"
"${CXX:-c++}" -std=c++17 -O2 -g0 -fPIC -shared -Wall -Wextra \
  -Wl,-soname,libmooncake_pg.so \
  "$here/transfer_seam.cpp" "$here/seam_check.cpp" -ldl \
  -o "$out/libmooncake_pg.so.tmp"
mv -f "$out/libmooncake_pg.so.tmp" "$out/libmooncake_pg.so"
