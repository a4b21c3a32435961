"""Which module may import or do what: checked on the source, or in a fresh interpreter.

The package is layered (``LAYERS``, bottom first): a module imports its own layer or
lower ones, never one above, and no modules import each other in a circle. Both are
read from the source with ``ast``, every import counted, at module level or in a
function: a function's import still makes the lower module depend on the upper one.

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
    # what everything uses: errors, files, processes, hashing, progress; the statistics
    # (analysis.stats: a spec's alpha) and the figure style (report.plots) sit here too,
    # and the testbed kinds (backends), which readers of stored descriptions look up
    (
        "foundation",
        "quicbed errors paths proc tarsafe yamlfile identity hostparam certs progress "
        "jsonlines plugins procnet tcpinfo analysis.stats report.plots spec.workloads "
        "spec.bulkobjects backends",
    ),
    # what runs on a testbed's three roles, without the testbed's life
    ("testbed roles", "testbed testbed.cgroups testbed.cpu testbed.roles"),
    # the link as data, the shapers and the interfaces' offloads, which act on the roles
    ("link shapers", "link link.model link.shapers link.offloads"),
    # a testbed's life: up, owned, torn down (its shaping cleared: quicbed.link.shapers)
    (
        "testbed",
        "testbed.base testbed.owner testbed.local testbed.ssh testbed.hosts testbed.sshlab",
    ),
    # a shaped, tuned, proven link
    (
        "link",
        "link.tuning link.probes link.power link.hostcpu link.receipt link.session link.proof "
        "link.udpprobe link.cpuprobe link.quiet link.loadproof link.hostpolicy",
    ),
    # instruments over a cell's loads (tcpdump, qlog, TCP state)
    ("traces", "traces traces.*"),
    # CPU profiles on request (perf, inferno, component shares)
    ("profile", "profile profile.*"),
    # the stacks (each owns its arms' settings) and the browsers
    (
        "servers and browsers",
        "spec.tcpopts spec.tparams spec.sockopts servers servers.* client client.*",
    ),
    # what a sweep or cell asks for: arms, cells, specs
    ("spec", "spec spec.arms spec.cellconfig spec.sweepspec spec.catalog"),
    # a results folder: its store, provenance, records; merge and export read it
    ("results", "results results.*"),
    # measuring: a transfer's or page's cell, a sweep over testbeds
    ("run", "console run run.*"),
    # from the store: which cells, why a load was slow
    ("analysis", "analysis analysis.select analysis.explain"),
    (
        "report",
        "report report.cellrow report.lines report.build report.cpu report.profile "
        "report.transfers report.axes report.windows",
    ),
    # a replication package, checked and rerun
    ("package", "package package.*"),
    ("cli", "cli cli.* __main__"),
]
#: what starts processes, shapes links or drives a browser
RUNNER = (
    "quicbed.run",
    "quicbed.testbed",
    "quicbed.servers",
    "quicbed.client",
    "quicbed.link.shapers",
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
