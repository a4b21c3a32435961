"""The README of a replication package, written from the package's own files.

A reviewer opens this first, often without quicbed installed: it says what is in the
package, how to check it, how to regenerate each figure with one command and how to
rerun each cell, with the real cell IDs and commands filled in.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from quicbed import __version__
from quicbed.results.folder import sweep_software

CONTENTS = [
    (
        "MANIFEST.json",
        "format, creation time, quicbed version, what was left out, and the "
        "size and SHA-256 of every other file",
    ),
    ("SHA256SUMS", "the same checksums, for `sha256sum -c SHA256SUMS` without quicbed"),
    (
        "results/",
        "the runs as a quicbed results folder: `sweep.json` (the resolved sweep "
        "spec), `store.sqlite` (cells, attempts with provenance and receipts, one row per "
        "load), `hars/` (every load's HAR, gzipped), `logs/` (server connection logs: "
        "Apache `access.log`/`error.log`, the QUIC server's `h3server.jsonl`; browser logs), "
        "`traces/` if packaged with `--traces` (per load: `trace.json`, qlog, TCP samples, "
        "packet captures; per arm: Chromium's NetLog, and its TLS key log only with `--keys`)",
    ),
    (
        "report/",
        "the report rebuilt from `results/`: `index.html` (self-contained), "
        "`table.csv` (statistics per cell), `figures.json` (what each heatmap cell shows), "
        "`figures/*.svg|png`",
    ),
    (
        "data/",
        "`runs.csv` and `runs.parquet` (one row per load, every parameter), "
        "`receipts.json` (every link fidelity receipt), `cells.json` (configurations, attempts)",
    ),
    (
        "provenance/",
        "`runs.json`: software, machine, sysctls, NIC offloads and testbed as "
        "recorded with the runs (and what was not recorded); `package.json`: what built this "
        "package",
    ),
    (
        "repo/",
        "the sweep presets, page sets, Ansible playbooks and roles, the testbed "
        "profile if there was one, and the version pins (requirements.txt, go.mod/go.sum, "
        "the page-load driver's lock file), as committed at the git SHA the runs recorded",
    ),
]


CELL_COLUMNS = [
    "cell",
    "scenario",
    "page",
    "rate Mbit/s",
    "RTT ms",
    "loss %",
    "mode",
    "packaged (TCP-QUIC)/QUIC %",
    "command",
]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _one(recorded: dict[str, Any], key: str) -> Any:
    """The value every attempt agrees on, else the first with a count of the others."""
    groups = recorded.get(key) or []
    return groups[0]["value"] if groups else None


def _software_line(recorded: dict[str, Any], used: Iterable[str] | None) -> list[str]:
    """The components the cells ran (``used``: provenance's names for them, as the
    software check reads them; None: every one recorded), each by its own record: a
    version where it has one, else its build. No component is named here: stacks and
    browsers name themselves in provenance (WebServer.software_name, Browser.software)."""
    sw = _one(recorded, "software") or {}
    mach = _one(recorded, "machine") or {}
    git = _one(recorded, "git") or {}
    names = [n for n in (sw if used is None else used) if n != "quicbed" and sw.get(n)]
    items = [
        (
            "quicbed",
            f"{sw.get('quicbed')} at git {str(git.get('sha'))[:12]}"
            + (" (uncommitted changes)" if git.get("dirty") else ""),
        ),
        *((n, _build(sw[n])) for n in names),
        ("kernel", mach.get("kernel")),
        ("OS", mach.get("os")),
        ("CPU", f"{mach.get('cpu')} x {mach.get('cores')}" if mach else None),
    ]
    lines = [f"- {k}: {v}" for k, v in items if v]
    several = [k for k, v in recorded.items() if isinstance(v, list) and len(v) > 1]
    if several:
        lines.append(f"- differs between attempts: {', '.join(several)} (see provenance/runs.json)")
    return lines


def _build(record: Any) -> str:
    """One component's record in a few words: its version, else the toolchain and the
    start of its build's digest (its modules and files are in provenance/runs.json)."""
    if not isinstance(record, dict):
        return str(record)
    if record.get("version"):
        return str(record["version"])
    parts = [str(record["go"])] if record.get("go") else []
    if record.get("sha256"):
        parts.append(f"build {str(record['sha256'])[:12]}")
    if record.get("deps"):
        parts.append(f"{len(record['deps'])} Go modules")
    return ", ".join(parts) or "recorded"


def _result(row: dict[str, str]) -> str:
    """A table.csv row's headline: the difference, or why there is none."""
    if not row["pct_diff"]:
        return row["status"] + (f": {row['problem']}" if row["problem"] else "")
    return f"{float(row['pct_diff']):+.1f}" + ("" if row["significant"] == "True" else " (n.s.)")


def _transfer_result(arms: list[dict[str, str]]) -> str:
    """A transfer cell's headline: each arm's goodput (bulk) or share (compete)."""
    first = arms[0]
    if first["status"] != "done":
        return first["status"] + (f": {first['problem']}" if first["problem"] else "")
    if first["kind"] == "bulk":
        return ", ".join(
            f"{t['arm']} {float(t['goodput_mbit_mean']):.1f} Mbit/s"
            if t["goodput_mbit_mean"]
            else f"{t['arm']} -"
            for t in arms
        )
    return ", ".join(
        f"{t['arm']} share {float(t['share_mean']) * 100:.0f} % (fair "
        f"{float(t['fair_share']) * 100:.0f} %)"
        if t["share_mean"]
        else f"{t['arm']} -"
        for t in arms
    )


def readme(top: Path, archive: str, counts: dict[str, int], no_har: bool) -> str:
    """The package's README.md: its facts gathered here, its text in
    templates/package-readme.md.j2."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    sweep_file = top / "results" / "sweep.json"
    sweep = json.loads(sweep_file.read_text()) if sweep_file.exists() else None
    prov = json.loads((top / "provenance" / "runs.json").read_text())
    recorded = prov.get("recorded", {})
    git = _one(recorded, "git") or {}
    with open(top / "report" / "table.csv", newline="") as f:
        cells = list(csv.DictReader(f))
    figures = json.loads((top / "report" / "figures.json").read_text())
    figure_rows = [
        [
            f"`report/figures/{f['svg']}` (and `.png`): " + f["shows"]["title"].replace("\n", " "),
            f"`results/report/figures/{f['svg']}`",
        ]
        for f in figures
    ]
    cell_rows = [
        [
            f"`{c['cell_id']}`",
            c["scenario"],
            c["page"],
            c["rate_mbit"] or "unlimited",
            c["rtt_ms"],
            c["loss_pct"],
            c["mode"],
            _result(c),
            f"`sudo quicbed cell --from {archive} --cell {c['cell_id']}`",
        ]
        for c in cells
    ]
    transfers = top / "report" / "transfers.csv"
    if transfers.exists():  # bulk and compete cells: one line per cell, its arms' numbers
        with open(transfers, newline="") as f:
            arms: dict[str, list[dict[str, str]]] = {}
            for t in csv.DictReader(f):
                arms.setdefault(t["cell_id"], []).append(t)
        cell_rows += [
            [
                f"`{cid}`",
                ts[0]["scenario"],
                f"{ts[0]['kind']} {ts[0]['object']}",
                ts[0]["rate_mbit"] or "unlimited",
                ts[0]["rtt_ms"],
                ts[0]["loss_pct"],
                "-",
                _transfer_result(ts),
                f"`sudo quicbed cell --from {archive} --cell {cid}`",
            ]
            for cid, ts in arms.items()
        ]
    env = Environment(
        loader=PackageLoader("quicbed", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("package-readme.md.j2").render(
        title=f"sweep `{sweep['spec']['name']}`" if sweep else "cells",
        desc=(sweep["spec"].get("description") or "") if sweep else "",
        counts=counts,
        version=__version__,
        sweep=sweep,
        archive=archive,
        stem=top.name,
        hars="left out (`--no-har`)" if no_har else f"{counts['hars']} HARs",
        sha=git.get("sha") or "(not recorded)",
        table=_table,
        contents=[[f"`{p}`", w] for p, w in CONTENTS],
        figure_rows=figure_rows,
        cell_columns=CELL_COLUMNS,
        cell_rows=cell_rows,
        profile=(top / "repo" / "profile.py").exists(),
        software=_software_line(recorded, sweep_software(sweep["spec"]) if sweep else None),
    )
