"""The README of a replication package, written from the package's own files.

A reviewer opens this first, often without quicbed installed: it says what is in the
package, how to check it, how to regenerate each figure with one command and how to
rerun each cell, with the real cell IDs and commands filled in.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from quicbed import __version__

CONTENTS = [
    ("MANIFEST.json", "format, creation time, quicbed version, what was left out, and the "
     "size and SHA-256 of every other file"),
    ("SHA256SUMS", "the same checksums, for `sha256sum -c SHA256SUMS` without quicbed"),
    ("results/", "the runs as a quicbed results folder: `sweep.json` (the resolved sweep "
     "spec), `store.sqlite` (cells, attempts with provenance and receipts, one row per "
     "load), `hars/` (every load's HAR, gzipped), `logs/` (server connection logs: "
     "Apache `access.log`/`error.log`, the QUIC server's `h3server.jsonl`; browser logs), "
     "`traces/` if packaged with `--traces` (per load: `trace.json`, qlog, TCP samples, "
     "packet captures; per arm: Chromium's NetLog, and its TLS key log only with `--keys`)"),
    ("report/", "the report rebuilt from `results/`: `index.html` (self-contained), "
     "`table.csv` (statistics per cell), `figures.json` (what each heatmap cell shows), "
     "`figures/*.svg|png`"),
    ("data/", "`runs.csv` and `runs.parquet` (one row per load, every parameter), "
     "`receipts.json` (every link fidelity receipt), `cells.json` (configurations, attempts)"),
    ("provenance/", "`runs.json`: software, machine, sysctls, NIC offloads and testbed as "
     "recorded with the runs (and what was not recorded); `package.json`: what built this "
     "package"),
    ("repo/", "the sweep presets, page sets, Ansible playbooks and roles, the testbed "
     "profile if there was one, and the version pins (requirements.txt, go.mod/go.sum, "
     "the page-load driver's lock file), as committed at the git SHA the runs recorded"),
]  # fmt: skip


CELL_COLUMNS = ["cell", "scenario", "page", "rate Mbit/s", "RTT ms", "loss %", "mode",
                "packaged (TCP-QUIC)/QUIC %", "command"]  # fmt: skip


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _one(recorded: dict[str, Any], key: str) -> Any:
    """The value every attempt agrees on, else the first with a count of the others."""
    groups = recorded.get(key) or []
    return groups[0]["value"] if groups else None


def _software_line(recorded: dict[str, Any]) -> list[str]:
    sw = _one(recorded, "software") or {}
    mach = _one(recorded, "machine") or {}
    git = _one(recorded, "git") or {}
    h3 = sw.get("quicbed-h3server") or {}
    quic_go = (h3.get("deps") or {}).get("github.com/quic-go/quic-go")
    items = [
        ("quicbed", f"{sw.get('quicbed')} at git {str(git.get('sha'))[:12]}"
         + (" (uncommitted changes)" if git.get("dirty") else "")),
        ("browser", sw.get("chromium")), ("TCP server", sw.get("apache")),
        ("QUIC server", f"quicbed-h3server ({h3.get('go')}, quic-go {quic_go})" if h3 else None),
        ("kernel", mach.get("kernel")), ("OS", mach.get("os")),
        ("CPU", f"{mach.get('cpu')} x {mach.get('cores')}" if mach else None),
    ]  # fmt: skip
    lines = [f"- {k}: {v}" for k, v in items if v]
    several = [k for k, v in recorded.items() if isinstance(v, list) and len(v) > 1]
    if several:
        lines.append(f"- differs between attempts: {', '.join(several)} (see provenance/runs.json)")
    return lines


def _result(row: dict[str, str]) -> str:
    """A table.csv row's headline: the difference, or why there is none."""
    if not row["pct_diff"]:
        return row["status"] + (f": {row['problem']}" if row["problem"] else "")
    return f"{float(row['pct_diff']):+.1f}" + ("" if row["significant"] == "True" else " (n.s.)")


def readme(top: Path, archive: str, counts: dict[str, int], no_har: bool) -> str:
    stem = top.name
    sweep_file = top / "results" / "sweep.json"
    sweep = json.loads(sweep_file.read_text()) if sweep_file.exists() else None
    prov = json.loads((top / "provenance" / "runs.json").read_text())
    recorded = prov.get("recorded", {})
    git = _one(recorded, "git") or {}
    sha = git.get("sha") or "(not recorded)"
    with open(top / "report" / "table.csv", newline="") as f:
        cells = list(csv.DictReader(f))
    figures = json.loads((top / "report" / "figures.json").read_text())
    title = f"sweep `{sweep['spec']['name']}`" if sweep else "cells"
    desc = (sweep["spec"].get("description") or "") if sweep else ""
    hars = "left out (`--no-har`)" if no_har else f"{counts['hars']} HARs"
    figure_rows = [[f"`report/figures/{f['svg']}` (and `.png`): "
                    + f["shows"]["title"].replace("\n", " "),
                    f"`results/report/figures/{f['svg']}`"] for f in figures]  # fmt: skip
    cell_rows = [[f"`{c['cell_id']}`", c["scenario"], c["page"], c["rate_mbit"] or "unlimited",
                  c["rtt_ms"], c["loss_pct"], c["mode"], _result(c),
                  f"`sudo quicbed cell --from {archive} --cell {c['cell_id']}`"]
                 for c in cells]  # fmt: skip
    out = [
        f"# Replication package: {title} (quicbed)",
        "",
        (f"{desc} " if desc else "")
        + f"{counts['cells']} cells, {counts['attempts']} attempts, {counts['runs']} page "
        f"loads ({hars}), {counts['logs']} log files"
        + (
            f", {counts['traces']} trace files ({counts.get('keys', 0)} of them TLS key logs, "
            "secrets that decrypt the captures)"
            if "traces" in counts
            else ""
        )
        + f". Packaged by quicbed {__version__}"
        + (f"; spec digest `{sweep['digest']}`." if sweep else "."),
        "",
        f"Publish the SHA-256 of `{archive}` (`sha256sum {archive}`) with your paper, so "
        "that readers know they hold the same bytes.",
        "",
        "## Contents",
        "",
        _table(["path", "what"], [[f"`{p}`", w] for p, w in CONTENTS]),
        "",
        "## Verify (no root, no browser, no testbed)",
        "",
        f"In a checkout of quicbed (the runs recorded git `{sha}`) with its Python "
        "environment (`python3 -m venv .venv && .venv/bin/pip install -r requirements.txt "
        "-e .`):",
        "",
        f"    quicbed verify {archive}",
        "",
        "checks every file against `MANIFEST.json`, recomputes every statistic, table, "
        "export and figure from `results/` alone and compares them with `report/` and "
        "`data/`, and recomputes each load's page load time from its HAR. Exit status 0: "
        "everything matches; 1: it lists exactly what differs. Without quicbed, "
        f"`cd {stem} && sha256sum -c SHA256SUMS` checks the bytes.",
        "",
        "## Regenerate the figures",
        "",
        "Each figure is regenerated from the runs alone by one command, run in the "
        f"extracted folder `{stem}/` (it rebuilds the whole report into `results/report/`):",
        "",
        "    quicbed report results",
        "",
        _table(["figure", "regenerated as"], figure_rows),
        "",
        "`report/figures.json` says what each heatmap cell shows (number, colour, "
        "significance); `report/table.csv` holds the statistics behind each cell and "
        "`data/runs.csv` the loads behind those.",
        "",
        "## Rerun a cell on the local testbed",
        "",
        "On Linux as root, in a quicbed checkout set up with `make setup`:",
        "",
        f"    sudo quicbed cell --from {archive} --cell ID",
        "",
        f"extracts the package's runs into `{stem}-rerun/` beside the archive (or "
        "`--out DIR`), measures the cell again with its exact stored configuration as a new "
        "attempt, and prints the new result beside the packaged one. `--where "
        "rate=50,rtt=36,page=5kb` picks a cell by its condition instead of its ID.",
        "",
        _table(CELL_COLUMNS, cell_rows),
        "",
        "## Rerun on Emulab or CloudLab",
        "",
    ]
    if (top / "repo" / "profile.py").exists():
        out += [
            "Instantiate `repo/profile.py` (a geni-lib, repository-based profile) on the "
            "portal; it provisions server, bridge and client with the Ansible roles in "
            "`repo/roles/`. Save the experiment's manifest (the portal's Manifest tab) as "
            "`manifest.xml`, then, from a quicbed checkout on your laptop or on the client "
            "node (no root needed there):",
            "",
            f"    quicbed cell --from {archive} --cell ID --testbed ssh --hosts manifest.xml",
            "",
            "`docs/testbed.md` in the repository walks through it.",
        ]
    else:
        out += [
            "The quicbed that made these runs had no Emulab profile yet (`repo/` holds no "
            "`profile.py`); use a later quicbed whose `profile.py` builds the three nodes, "
            "and its SSH testbed options with the command above (`quicbed cell --help`). "
            "The cell configurations (`data/cells.json`) are complete, including the shaper.",
        ]
    out += ["", "## Software that ran", "", *_software_line(recorded), "",
            "Everything else (Python packages, sysctls, NIC offloads, Go modules, what was "
            "not recorded) is in `provenance/runs.json`.", ""]  # fmt: skip
    return "\n".join(out)
