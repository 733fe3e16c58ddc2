"""Runs torch's generic distributed test suite (DistributedTest._DistTestBase, shipped in the
torch wheel) against the mooncake-cpu backend and prints pass/fail/skip counts.

    python tests/torch_suite/run_torch_suite.py [--world-size 2] [-k PATTERN ...] [--list]
           [--failfast] [--timeout 120] [--junit out.txt]

torch's own launcher (test/distributed/test_distributed_spawn.py, not in the wheel) accepts only
gloo/nccl/ucc, so this file is the launcher: it sets BACKEND/WORLD_SIZE/TEMP_DIR, imports
mooncake_pg at module level (spawned children re-import this file as __mp_main__, so they register
the backend too) and adds our name to DistTestCases.backend_feature ("plugin", "ddp", "subgroup").
Many tests branch on BACKEND == "gloo"/"nccl" and skip otherwise: skips are counted separately.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import unittest

BACKEND = "mooncake-cpu"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import mooncake  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))

os.environ["BACKEND"] = BACKEND
# The suite's skip decorators read WORLD_SIZE when the module is imported (below), so take
# --world-size from the command line now (spawned children inherit the environment).
for _i, _a in enumerate(sys.argv):
    if _a == "--world-size" and _i + 1 < len(sys.argv):
        os.environ["WORLD_SIZE"] = sys.argv[_i + 1]
    elif _a.startswith("--world-size="):
        os.environ["WORLD_SIZE"] = _a.split("=", 1)[1]
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="mc-torch-suite-")
os.makedirs(os.path.join(os.environ["TEMP_DIR"], "barrier"), exist_ok=True)
os.environ.setdefault("MOONCAKE_GOMAXPROCS", "2")

import mooncake_pg  # noqa: E402,F401  registers the backend (in children too)
import torch  # noqa: E402
from torch.testing._internal import common_distributed  # noqa: E402

for feature in ("plugin", "ddp", "subgroup"):
    common_distributed.DistTestCases.backend_feature.setdefault(feature, set()).add(BACKEND)

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestMooncakeWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


class CountingResult(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.passed = []
        self.times = {}
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.time()
        super().startTest(test)

    def stopTest(self, test):
        self.times[test.id()] = time.time() - self._t0
        super().stopTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(test)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=int(os.environ["WORLD_SIZE"]))
    ap.add_argument("-k", action="append", default=[], help="substring filter (repeatable)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--failfast", action="store_true")
    ap.add_argument("--timeout", type=int, default=120, help="per-test timeout in seconds")
    ap.add_argument("--report", help="write one line per test (status name seconds) here")
    args = ap.parse_args()
    os.environ["WORLD_SIZE"] = str(args.world_size)
    TestMooncakeWithSpawn.world_size = property(lambda self: args.world_size)  # type: ignore
    common_distributed.TIMEOUT_DEFAULT = args.timeout

    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestMooncakeWithSpawn)
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestMooncakeWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=CountingResult,
                                     failfast=args.failfast)
    t0 = time.time()
    res = runner.run(suite)
    dt = time.time() - t0
    failed = len(res.failures) + len(res.errors) + len(res.unexpectedSuccesses)
    print(f"\nmooncake-cpu torch suite (world size {args.world_size}): {res.testsRun} run, "
          f"{len(res.passed)} passed, {failed} failed, {len(res.skipped)} skipped, "
          f"{len(res.expectedFailures)} expected failures in {dt:.0f}s")
    if args.report:
        with open(args.report, "w") as f:
            for t in res.passed:
                f.write(f"PASS {t.id().split('.')[-1]} {res.times.get(t.id(), 0):.1f}\n")
            for t, _ in res.failures + res.errors:
                f.write(f"FAIL {t.id().split('.')[-1]} {res.times.get(t.id(), 0):.1f}\n")
            for t, why in res.skipped:
                f.write(f"SKIP {t.id().split('.')[-1]} {why.strip().splitlines()[0][:100] if why else ''}\n")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
