"""Console-script entry points that exec the Go commands shipped inside the package.

The four commands are one multi-call binary, bin/mooncake (cmd/mooncake), which runs the command
its argv[0] names; each entry point execs it under the command's name."""

import os
import sys


def _exec(name: str) -> None:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "mooncake")
    if not os.path.exists(path):
        sys.exit(f"{name}: {path} is missing; reinstall mooncake-transfer-engine")
    os.execv(path, [name] + sys.argv[1:])


def mooncake_master() -> None:
    _exec("mooncake_master")


def mooncake_client() -> None:
    _exec("mooncake_client")


def transfer_engine_bench() -> None:
    _exec("transfer_engine_bench")


def mooncake_http_metadata_server() -> None:
    _exec("mooncake_http_metadata_server")
