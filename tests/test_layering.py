"""Which module may import or do what: checked on the source, or in a fresh interpreter.

The package is layered (``LAYERS``, bottom first): a module imports its own layer or
lower ones, never one above, and no modules import each other in a circle. Both are
read from the source with ``ast``, every import counted, at module level or in a
function: a function's import still makes the lower module depend on the upper one.

Its folders are layers too (``FOLDERS``, bottom first), so that where a module lives
says what it may use: a folder imports its own or lower ones, and no folders import
each other in a circle, but for the imports listed, one by one, in ``KNOWN_UPWARD``.

A fresh interpreter for what a command loads, because pytest has long imported the
runner by the time these tests run: ``sys.modules`` of this process says nothing about
what ``verify`` needs.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "quicbed"

#: The package's map, bottom first: (layer, its modules). A name is a module under
#: quicbed ("quicbed" itself is the package's __init__); "x.*" is every module under x.
#: Every module is in exactly one layer, so a new module must be placed here.
LAYERS = [
    # what everything uses: errors, files, processes, hashing, progress, figure files, and
    # the testbed kinds (backends), which readers of stored descriptions look up
    (
        "foundation",
        "quicbed errors paths proc tarsafe yamlfile identity hostparam certs progress "
        "jsonlines plugins procnet tcpinfo figsave backends pcap timelog",
    ),
    # the link as data
    ("model", "model model.*"),
    # what runs on a testbed's three roles, without the testbed's life
    ("roles", "roles roles.*"),
    # the shapers, which act on the roles
    ("shapers", "shapers shapers.*"),
    # a testbed's life: up, owned, torn down (its shaping cleared: quicbed.shapers)
    ("testbed", "testbed testbed.*"),
    # a shaped, tuned, proven link
    ("link", "link link.*"),
    # instruments over a cell's loads (tcpdump, qlog, TCP state)
    ("traces", "traces traces.*"),
    # CPU profiles on request (perf, inferno, component shares)
    ("profile", "profile profile.*"),
    # an arm's settings: transport parameters, socket and host knobs, TCP options
    ("settings", "settings settings.*"),
    # real pages: replay archives, their import and models, served per origin
    ("replay", "replay replay.*"),
    # the browsers and the stacks (each owns its arms' settings)
    ("client", "client client.*"),
    ("servers", "servers servers.*"),
    # what a sweep or cell asks for: arms, cells, specs, pages, the statistics it may ask for
    ("spec", "spec spec.*"),
    # a results folder: its store, provenance, records; merge and export read it
    ("results", "results results.*"),
    # from the store: statistics, summaries and comparisons, which cells, why a load was slow
    ("analysis", "analysis analysis.*"),
    # measuring: a transfer's or page's cell (its verdict from analysis), a sweep over
    # testbeds, and what the commands print of it
    ("run", "run run.*"),
    # tables, figures and the report's pages from the store
    ("report", "report report.*"),
    # a replication package, checked and rerun
    ("package", "package package.*"),
    ("cli", "cli cli.* __main__"),
]
#: The package's folders, bottom first: each folder is one layer of LAYERS, of the same
#: name (a module at the package's top, quicbed/x.py, is in "foundation"; __main__, the
#: command's entry, in "cli"). A new folder must be placed in LAYERS.
FOLDERS = [layer for layer, _ in LAYERS]
#: Imports from a folder to one above it that stand for now, each (importing module,
#: imported module). Checked exactly: an upward import not listed fails the test, and
#: one gone from the code must be struck from here.
KNOWN_UPWARD: set[tuple[str, str]] = set()
#: what starts processes, shapes links or drives a browser
RUNNER = (
    "quicbed.run",
    "quicbed.testbed",
    "quicbed.servers",
    "quicbed.client",
    "quicbed.shapers",
)


def imported_by(*modules: str) -> list[str]:
    """The runner's modules that importing ``modules`` brings in, in a fresh interpreter."""
    code = (
        f"import {', '.join(modules)}, sys; "
        f"print('\\n'.join(m for m in sys.modules if m.startswith({RUNNER!r})))"
    )
    cp = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    return cp.stdout.split()


def test_verify_and_the_results_layout_do_not_import_the_runner() -> None:
    """``quicbed verify`` runs on any machine, without root: it must not even import
    the code that brings up testbeds, servers and browsers (nor must the modules that
    only read or guard a results folder)."""
    assert imported_by("quicbed.package.verify") == []
    assert (
        imported_by(
            "quicbed.results.folder",
            "quicbed.package.build",
            "quicbed.results.merge",
            "quicbed.package.rerun",
            "quicbed.results.export",
            "quicbed.results.store",
            "quicbed.identity",
        )
        == []
    )


def test_no_sql_outside_the_store() -> None:
    """Every read and write of the results database goes through quicbed.results.store."""
    sql = re.compile(r"execute\(|SELECT|INSERT")
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p == PACKAGE / "results" / "store.py":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if sql.search(line):
                found.append(f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}")
    assert found == []


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its __init__.py)."""
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """Per module, the package's modules it imports, each with the line of its first
    import. ``from quicbed import x`` is the module quicbed.x where there is one."""
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..y import z
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            for name in names:
                target = resolve(name)
                if target is not None and target != m:
                    graph[m].setdefault(target, node.lineno)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module."""
    reach: dict[str, set[str]] = {}
    for m in graph:
        seen: set[str] = set()
        todo = [m]
        while todo:
            new = set(graph[todo.pop()]) - seen
            seen |= new
            todo += new
        reach[m] = seen
    found = {
        tuple(sorted({m} | {n for n in reach[m] if m in reach[n]})) for m in graph if m in reach[m]
    }
    return sorted(list(c) for c in found)


def layer_of() -> dict[str, list[str]]:
    """Per module, the layers that list it (one, when LAYERS is right)."""
    out: dict[str, list[str]] = {m: [] for m in modules()}
    for layer, names in LAYERS:
        for name in names.split():
            full = "quicbed" if name == "quicbed" else f"quicbed.{name}"
            hits = [
                m for m in out if (m.startswith(full[:-1]) if name.endswith(".*") else m == full)
            ]
            assert hits, f"LAYERS: {layer}: {name} names no module"
            for m in hits:
                out[m].append(layer)
    return out


def test_no_import_circles() -> None:
    """Modules that import each other, even from inside a function, cannot be
    understood, tested or moved one at a time."""
    found = circles(import_graph())
    assert found == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_module_is_in_one_layer() -> None:
    """A new module is placed on the map (LAYERS) when it is written."""
    wrong = {m: layers for m, layers in layer_of().items() if len(layers) != 1}
    assert wrong == {}, f"put each in exactly one layer of LAYERS: {wrong}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    """Each layer builds on those below it only: a module that reaches up, even from
    inside a function, makes the lower layer need the upper one, and the map lies."""
    rank = {layer: i for i, (layer, _) in enumerate(LAYERS)}
    where = {m: layers[0] for m, layers in layer_of().items() if layers}
    upward = [
        f"{m} ({where[m]}), line {line}: imports {target} ({where[target]})"
        for m, targets in sorted(import_graph().items())
        for target, line in sorted(targets.items())
        if m in where and target in where and rank[where[target]] > rank[where[m]]
    ]
    assert upward == [], "imports of a higher layer:\n" + "\n".join(upward)


def folder_of() -> dict[str, str]:
    """Per module, its folder: the first folder of its path, "foundation" at the top but
    for ``python -m quicbed``'s entry (__main__), the command's own."""
    out = {}
    for m, path in modules().items():
        parts = path.relative_to(PACKAGE).parts
        out[m] = parts[0] if len(parts) > 1 else "foundation"
    out["quicbed.__main__"] = "cli"
    return out


def test_each_folder_is_one_layer() -> None:
    """Where a module lives says which layer it is in: its layer is its folder's."""
    layers = layer_of()
    wrong = {m: (f, layers[m]) for m, f in folder_of().items() if layers[m] != [f]}
    assert wrong == {}, f"module: (its folder, its layers): {wrong}"


def folder_imports() -> list[tuple[str, str, int]]:
    """Every import of a module in another folder: (importing module, imported, line)."""
    where = folder_of()
    return [
        (m, target, line)
        for m, targets in sorted(import_graph().items())
        for target, line in sorted(targets.items())
        if where[m] != where[target]
    ]


def test_every_folder_is_placed() -> None:
    """A new folder is placed on the folders' map (FOLDERS) when it is made."""
    placed = list(FOLDERS)
    assert sorted(placed) == sorted(set(folder_of().values())), (
        f"FOLDERS {placed} against the package's folders {sorted(set(folder_of().values()))}"
    )


def test_no_folder_imports_a_folder_above_its_own() -> None:
    """A folder builds on those below it only, so where a module lives says what it may
    use. The upward imports that stand (KNOWN_UPWARD) are checked exactly: a new one
    fails, and one gone from the code must be struck from the list."""
    rank = {f: i for i, f in enumerate(FOLDERS)}
    where = folder_of()
    upward = {
        (m, target): line
        for m, target, line in folder_imports()
        if rank[where[target]] > rank[where[m]]
    }
    new = [
        f"{m} ({where[m]}), line {line}: imports {target} ({where[target]})"
        for (m, target), line in sorted(upward.items())
        if (m, target) not in KNOWN_UPWARD
    ]
    gone = [f"{m} -> {target}" for m, target in sorted(KNOWN_UPWARD - set(upward))]
    assert new == [], "imports of a higher folder:\n" + "\n".join(new)
    assert gone == [], "KNOWN_UPWARD lists imports the code no longer has:\n" + "\n".join(gone)


def test_no_folder_circles() -> None:
    """Folders that import each other (but for KNOWN_UPWARD) cannot be understood, tested
    or moved one at a time; the message names each import between a circle's folders."""
    where = folder_of()
    edges = [(m, t, line) for m, t, line in folder_imports() if (m, t) not in KNOWN_UPWARD]
    graph: dict[str, dict[str, int]] = {f: {} for f in set(where.values())}
    for m, target, line in edges:
        graph[where[m]].setdefault(where[target], line)
    found = [
        " <-> ".join(c)
        + "".join(
            f"\n  {m}, line {line}: imports {t}"
            for m, t, line in edges
            if where[m] in c and where[t] in c
        )
        for c in circles(graph)
    ]
    assert found == [], "folder circles:\n" + "\n".join(found)
