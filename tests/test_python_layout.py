"""The Python package's layout (issue 37): no Python file under python/ is over 800 lines, and the
store's C binding lives in one module, ``mooncake._store_abi``: it alone both imports ctypes and
names libmooncake's store entries (``mc_store_*``, ``mc_host_*``), and it declares every entry the
package calls, once. The API modules call the entries through it and never import ctypes; modules
that use ctypes for memory (tensor codecs, BufferHandle, libc) never name an entry.

Reads the source tree (python/), so it needs neither the library nor an installed package.
"""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, "python")
MAX_LINES = 800
BINDING = "mooncake/_store_abi.py"
# Modules that bind other parts of the library with ctypes (the loader, the transfer engine, the
# process group, the GPU runtime): they may import ctypes, but store entries are not theirs.
OTHER_BINDINGS = {"mooncake/_native.py", "mooncake/engine.py", "mooncake/pg.py", "mooncake/_gpu.py"}
STORE_ENTRY = re.compile(r"^mc_(store|host)_\w+$")
# names that look like entries and are not: upstream's command of the store's REST service
NOT_ENTRIES = {"mc_store_rest_server"}


def python_files() -> dict:
    """{path relative to python/: source} of every .py file under python/ (no build outputs)."""
    out = {}
    for d, dirs, files in os.walk(PY):
        dirs[:] = sorted(x for x in dirs if x not in ("__pycache__", "build", "dist") and not x.startswith(".")
                         and not x.endswith(".egg-info"))
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    out[os.path.relpath(p, PY)] = fh.read()
    return out


def imports_ctypes(tree: ast.AST) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "ctypes" for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "ctypes":
            return True
    return False


def store_entries(tree: ast.AST) -> set:
    """The store entries a module names in code: attributes (``lib.mc_store_put``), names, and
    strings that are exactly an entry's name (``getattr(lib, "mc_store_put")``, signature
    tables); docstrings that mention one do not count."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and STORE_ENTRY.match(n.attr):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and STORE_ENTRY.match(n.id):
            out.add(n.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and STORE_ENTRY.match(n.value):
            out.add(n.value)
    return out


def declared_entries(tree: ast.AST) -> list:
    """The keys of the binding's signature tables (module-level dicts of entry -> signature), in
    order, duplicates kept."""
    out = []
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict):
            for k in n.value.keys:
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and STORE_ENTRY.match(k.value):
                    out.append(k.value)
    return out


def test_no_python_file_over_800_lines():
    files = python_files()
    assert "mooncake/store.py" in files and BINDING in files
    long = {p: src.count("\n") for p, src in files.items() if src.count("\n") > MAX_LINES}
    assert long == {}, f"Python files over {MAX_LINES} lines: {long}; split them by concern"


def test_only_the_binding_module_speaks_ctypes_to_the_store():
    files = python_files()
    offenders = {}
    for p, src in files.items():
        if p == BINDING:
            continue
        tree = ast.parse(src, p)
        named = store_entries(tree)
        if named and imports_ctypes(tree):
            offenders[p] = sorted(named)
        elif named and p in OTHER_BINDINGS:
            offenders[p] = sorted(named)
    assert offenders == {}, (f"modules that import ctypes and name store entries: {offenders}; declare "
                             f"entries in {BINDING} and call them through it")
    assert imports_ctypes(ast.parse(files[BINDING]))


def test_store_api_modules_do_not_import_ctypes():
    """The store's API modules build C arguments with the binding's names (``_u64``, ``byref``,
    ...); of the store's modules only the binding and ``_store_memory`` (BufferHandle's arrays over
    library memory, libc's allocator, NUMA system calls; it names no entry) import ctypes."""
    files = python_files()
    api = [p for p in files if re.match(r"^mooncake/(store|_store_\w+)\.py$", p)]
    assert len(api) > 3
    with_ctypes = sorted(p for p in api if imports_ctypes(ast.parse(files[p], p)))
    assert with_ctypes == [BINDING, "mooncake/_store_memory.py"]


def test_the_binding_declares_every_entry_the_package_calls_once():
    files = python_files()
    declared = declared_entries(ast.parse(files[BINDING]))
    dup = sorted({e for e in declared if declared.count(e) > 1})
    assert dup == [], f"entries declared twice in {BINDING}: {dup}"
    called = set()
    for p, src in files.items():
        if p != BINDING:
            called |= store_entries(ast.parse(src, p))
    # the binding's own helpers call some entries too (mc_store_free, mc_host_alloc, ...)
    tree = ast.parse(files[BINDING])
    called |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and STORE_ENTRY.match(n.attr)}
    called -= NOT_ENTRIES
    assert called, "no store entry is called anywhere: the check lost its way"
    assert sorted(called - set(declared)) == [], f"entries called but not declared in {BINDING}"


# ---- the binding's signatures against the C side ----------------------------------------------

_GO_SCALARS = {"C.int": (4, True), "C.int32_t": (4, True), "C.uint32_t": (4, False), "C.int64_t": (8, True),
               "C.uint64_t": (8, False), "C.size_t": (8, False), "C.uint8_t": (1, False)}
_C_SCALARS = {t[2:]: k for t, k in _GO_SCALARS.items()}


def _go_kind(t: str, where: str):
    """A Go cgo type as the binding must see it: "ptr" or (size, signed)."""
    t = t.strip()
    if t.startswith("*") or t == "unsafe.Pointer" or t.endswith("_fn"):
        return "ptr"
    assert t in _GO_SCALARS, f"{where}: cgo type {t!r} unknown to this test; add it to _GO_SCALARS"
    return _GO_SCALARS[t]


def _c_kind(decl: str, where: str):
    """A C parameter or result declaration ("size_t size", "void *p", "void *") as a kind."""
    if "*" in decl:
        return "ptr"
    words = decl.replace("const ", "").split()
    if words in (["void"], []):
        return None
    t = words[0]
    assert t in _C_SCALARS, f"{where}: C type {t!r} unknown to this test; add it to _GO_SCALARS"
    return _C_SCALARS[t]


def _ctypes_kind(t):
    import ctypes
    if t is None:
        return None
    if t in (ctypes.c_char_p, ctypes.c_void_p) or issubclass(t, (ctypes._Pointer, ctypes._CFuncPtr)):
        return "ptr"
    return ctypes.sizeof(t), t(-1).value < 0


def exported_entries() -> dict:
    """{entry: (return kind, [argument kinds])} of the store's //export functions in capi/*.go
    and its C functions in capi/*.c (mc_host_alloc, mc_host_free)."""
    out = {}
    capi = os.path.join(ROOT, "capi")
    for f in sorted(os.listdir(capi)):
        if not f.endswith((".go", ".c")) or f.endswith("_test.go"):
            continue
        with open(os.path.join(capi, f), encoding="utf-8") as fh:
            src = fh.read()
        if f.endswith(".c"):
            for m in re.finditer(r"^(\w[\w\s*]*?)\s*\b(mc_(?:store|host)_\w+)\(([^)]*)\)\s*\{", src, re.M):
                ret, name, params = m.group(1), m.group(2), " ".join(m.group(3).split())
                args = [_c_kind(p, f"{f}: {name}") for p in params.split(",") if p.strip() not in ("", "void")]
                out[name] = (_c_kind(ret, f"{f}: {name}"), args)
            continue
        for m in re.finditer(r"^//export (mc_(?:store|host)_\w+)\nfunc \1\(([^)]*)\)\s*([^{]*)\{", src, re.M):
            name, params, ret = m.group(1), " ".join(m.group(2).split()), m.group(3).strip()
            kinds, pending = [], 0
            for item in (p.strip() for p in params.split(",") if p.strip()):
                parts = item.split(None, 1)
                if len(parts) == 1:  # "a, b C.uint64_t": a takes b's type
                    pending += 1
                    continue
                k = _go_kind(parts[1], f"{f}: {name}")
                kinds += [k] * (pending + 1)
                pending = 0
            assert pending == 0, f"{f}: {name}: cannot read its parameters {params!r}"
            out[name] = (_go_kind(ret, f"{f}: {name}") if ret else None, kinds)
    return out


def test_the_binding_matches_the_exported_c_entries():
    """Every declared entry exists in capi/ with the same number of arguments, each a pointer
    where C has one and a scalar of the same width and signedness elsewhere, and the same result
    (a mismatch is silent memory corruption under ctypes). Uses the installed package's binding."""
    from mooncake import _store_abi

    exported = exported_entries()
    # 35 mc_store_* (one entry per data family since issue 37) and mc_host_alloc/free
    assert len(exported) >= 37, f"found only {len(exported)} //export store entries in capi/"
    bad = {}
    for name, (res, args) in _store_abi.SIGNATURES.items():
        if name not in exported:
            bad[name] = "not exported by capi/"
            continue
        want_res, want_args = exported[name]
        got = (_ctypes_kind(res), [_ctypes_kind(a) for a in args])
        if got != (want_res, want_args):
            bad[name] = f"binding {got} != capi {(want_res, want_args)}"
    assert bad == {}
