"""Every environment variable the Python package reads is documented in docs/configuration.md.

The Go library's knobs are checked against the doc's knob table by `go test ./config`
(TestDocTable). This checks what Go cannot see: the variables read in python/ (the package
python/mooncake and the top-level mooncake_pg), in the torch shim's C++ (torchext/*.cpp,
*.hpp: getenv / envOn) and in the build (setup.py, torchext/build.py). Each must be named, in
backticks, in the first cell of a table row of docs/configuration.md.

Reads are found in the syntax tree, not by grepping: os.environ.get / os.getenv / os.environ[...] /
"X" in os.environ / os.environ.pop / setdefault with a constant name, through an alias
(env = os.environ.get; env("X")), or through a helper that passes one of its parameters to such a
read (_env_flag("X", True)).
"""

from __future__ import annotations

import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "configuration.md")
PY_SOURCES = sorted(glob.glob(os.path.join(ROOT, "python", "**", "*.py"), recursive=True)) + [
    os.path.join(ROOT, "setup.py"), os.path.join(ROOT, "torchext", "build.py")]
CPP_SOURCES = sorted(glob.glob(os.path.join(ROOT, "torchext", "*.cpp")) + glob.glob(os.path.join(ROOT, "torchext", "*.hpp")))
ENV_METHODS = {"get", "pop", "setdefault", "__getitem__"}


def _is_environ(node) -> bool:
    """os.environ, or environ imported from os."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def _is_env_reader(func) -> bool:
    """os.environ.get (and pop, setdefault), os.getenv, getenv."""
    if isinstance(func, ast.Attribute) and func.attr in ENV_METHODS and _is_environ(func.value):
        return True
    if isinstance(func, ast.Attribute) and func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
        return True
    return isinstance(func, ast.Name) and func.id == "getenv"


def _callee(func) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def env_reads(source: str) -> set[str]:
    tree = ast.parse(source)
    aliases = set()  # names bound to an env reader: env = os.environ.get
    helpers = {}  # function name -> index of the parameter it reads from the environment
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_env_reader(node.value):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in node.args.args]
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and _is_env_reader(call.func) and call.args \
                        and isinstance(call.args[0], ast.Name) and call.args[0].id in params:
                    helpers[node.name] = params.index(call.args[0].id)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            name = _callee(node.func)
            if _is_env_reader(node.func) or (isinstance(node.func, ast.Name) and node.func.id in aliases):
                found.add(_const(node.args[0]))
            elif name in helpers and len(node.args) > helpers[name]:
                found.add(_const(node.args[helpers[name]]))
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            found.add(_const(node.slice))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and _is_environ(node.comparators[0]):
            found.add(_const(node.left))
    return {n for n in found if n}


def cpp_env_reads(source: str) -> set[str]:
    return set(re.findall(r"\b(?:std::)?(?:getenv|envOn)\(\s*\"([A-Za-z0-9_]+)\"", source))


def documented() -> set[str]:
    """Names in backticks in the first cell of each table row of docs/configuration.md."""
    out = set()
    for line in open(DOC):
        if line.startswith("|"):
            first = line.strip().strip("|").split("|")[0]
            out |= set(re.findall(r"`([A-Za-z0-9_]+)`", first))
    return out


def read_by_package() -> dict[str, set[str]]:
    reads = {}
    for path in PY_SOURCES:
        if os.path.exists(path):
            reads[os.path.relpath(path, ROOT)] = env_reads(open(path).read())
    for path in CPP_SOURCES:
        reads[os.path.relpath(path, ROOT)] = cpp_env_reads(open(path).read())
    return reads


def test_scanner_finds_known_reads():
    # each way of reading the environment that the package uses today, so that a scanner that
    # finds nothing cannot pass
    found = set().union(*read_by_package().values())
    for name in ("MOONCAKE_LIB",  # os.environ.get
                 "MOONCAKE_TENANT_ID",  # env = os.environ.get; env(...)
                 "MOONCAKE_PG_AUTO_SYNC_ON_FAILURE",  # _env_flag(name, default)
                 "MOONCAKE_PG_SEGV_TRACE",  # C++ getenv
                 "MOONCAKE_PG_RUN_INLINE"):  # C++ envOn
        assert name in found, name
    assert env_reads('import os\nx = "A" in os.environ\ny = os.environ["B"]\nz = os.getenv("C")\n') == {"A", "B", "C"}


def test_every_variable_read_is_documented():
    doc = documented()
    missing = {f"{name} ({path})" for path, names in read_by_package().items() for name in names if name not in doc}
    assert not missing, f"docs/configuration.md does not list: {sorted(missing)}"
