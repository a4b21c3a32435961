"""Which module may import or do what: checked on the source, in a fresh interpreter.

A fresh interpreter, because pytest has long imported the runner by the time these
tests run: ``sys.modules`` of this process says nothing about what ``verify`` needs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "quicbed"
#: what starts processes, shapes links or drives a browser
RUNNER = (
    "quicbed.sweep",
    "quicbed.cell",
    "quicbed.testbed",
    "quicbed.servers",
    "quicbed.client",
    "quicbed.link.shapers",
    "quicbed.pool",
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
    assert imported_by("quicbed.verify") == []
    assert (
        imported_by(
            "quicbed.results",
            "quicbed.package",
            "quicbed.merge",
            "quicbed.rerun",
            "quicbed.export",
            "quicbed.store",
            "quicbed.identity",
        )
        == []
    )


def test_no_sql_outside_the_store() -> None:
    """Every read and write of the results database goes through quicbed.store."""
    sql = re.compile(r"execute\(|SELECT|INSERT")
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p == PACKAGE / "store.py":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if sql.search(line):
                found.append(f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}")
    assert found == []
