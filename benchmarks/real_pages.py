"""Real pages replayed (issue 40): an imported 24-origin page in two browsers, and the
page-model corpus under the long-look study's four scenarios.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/real_pages.py [--part imported|corpus|both]
        [--out DIR] [--md FILE] [--tables-only]

Part "imported": the p50 page model (24 origins, 66 entries) is loaded by Chromium
at traces level full over h2 (50 Mbit/s, 36 ms), its HAR (with every body) imported
with `quicbed pages import` as `p50-recorded`, and benchmarks/specs/imported-page.yaml
run: that page over h2, h3 and h3-envoy, 10 loads + 1 warm-up per arm, 0-RTT mode, in
Chromium and in Firefox. Part "corpus": sweeps/real-pages.yaml as it stands (p25, p50
and p90 over h2 and h3 at 10 and 50 Mbit/s in the study's baseline, loss, latency and
reordering scenarios).

Prints, per cell and arm: the scenario, browser, valid of the measured loads, how many
of those loads have every entry of the archive in their HAR ("whole HAR"), and the
mean and standard deviation of PLT, FCP and LCP over the valid loads (ms); then per
cell h2 against each h3 arm: the difference of means in % (positive: the h3 arm is
faster) and Welch's p, for PLT and for LCP. The head gives the host's steal and busy
shares over the run (/proc/stat) and the wall time.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from quicbed.analysis.cells import compare_cell
from quicbed.link import hostcpu
from quicbed.replay import archive as arch
from quicbed.replay.harimport import import_har
from quicbed.results.store import Store
from quicbed.run.sweep import run_sweep
from quicbed.spec.cellconfig import CellConfig, make_cell
from quicbed.spec.sweepspec import load_spec
from quicbed.testbed.local import LocalTestbed

ROOT = Path(__file__).resolve().parent.parent
IMPORTED_SPEC = ROOT / "benchmarks" / "specs" / "imported-page.yaml"
CORPUS_SPEC = ROOT / "sweeps" / "real-pages.yaml"
RECORDED = "p50-recorded"
QUICBED = ROOT / ".venv" / "bin" / "quicbed"
ARM_HEAD = ["scenario", "Mbit/s", "RTT ms", "page", "browser", "arm", "valid", "whole HAR"]
ARM_HEAD += ["PLT", "sd", "FCP", "sd", "LCP", "sd"]
PAIR_HEAD = ["scenario", "Mbit/s", "RTT ms", "page", "browser", "pair"]
PAIR_HEAD += ["PLT diff %", "PLT Welch p", "LCP diff %", "LCP Welch p"]


def record(out: Path) -> str:
    """The p50 model loaded at traces level full (a warm-up and 2 loads, the fewest a
    cell takes) and its HAR imported as ``p50-recorded`` (kept if the store has it
    already); returns what was done."""
    if arch.find(RECORDED) is not None:
        return f"{RECORDED} was in the page store already"
    rec = out / "record"
    argv = ["--page", "p50", "--arms", "h2", "--runs", "2", "--rate", "50", "--rtt", "36"]
    argv += ["--traces", "full", "--prefix", "qbrec", "--out", str(rec)]
    subprocess.run([str(QUICBED), "cell", *argv], check=True)
    store = Store.open_readonly(rec)
    try:
        run = next(r for r in store.all_runs() if not r.warmup and r.valid and r.har_path)
    finally:
        store.close()
    har = out / "p50.har"
    with gzip.open(rec / str(run.har_path)) as f:
        har.write_bytes(f.read())
    imported = import_har(har, RECORDED, arch.store())
    return (
        f"{RECORDED} imported from a Chromium load of p50 at traces level full: "
        f"{len(imported.origins)} origins, {len(list(imported.entries()))} entries"
    )


def _mean_sd(xs: list[float]) -> tuple[str, str]:
    mean = f"{statistics.mean(xs):.0f}" if xs else "-"
    return mean, (f"{statistics.stdev(xs):.0f}" if len(xs) > 1 else "-")


def _cells(store: Store) -> list[tuple[str, int, CellConfig, list[str]]]:
    """The latest attempts in the spec's order (scenario, rate, RTT, page): each cell's
    ID, attempt, config and its rows' first columns (scenario, rate, RTT, page)."""
    order = {n: i for i, n in enumerate(("baseline", "loss", "latency", "reordering"))}
    out = []
    for cid, att in store.latest_attempts().items():
        cfg = make_cell(**store.cell_config(cid))
        scen, c = ",".join(store.scenarios(cid)), cfg.condition
        head = [scen, f"{c.rate_mbit:g}", f"{c.rtt():g}", cfg.page]
        key = (order.get(scen, 9), scen, c.rate_mbit or 0, c.rtt(), cfg.page)
        out.append((key, (cid, att.attempt, cfg, head)))
    return [cell for _, cell in sorted(out, key=lambda x: x[0])]


def arm_rows(root: Path) -> list[list[str]]:
    """One row per cell and arm, from the store alone."""
    store = Store(root)
    rows = []
    try:
        for cid, attempt, cfg, head in _cells(store):
            runs = store.runs(cid, attempt)
            for a in cfg.resolved_arms():
                measured = [r for r in runs if r.arm == a.name and not r.warmup]
                valid = [r for r in measured if r.valid]
                whole = [r for r in valid if r.objects == _entries(cfg.page)]
                row = [*head, str(a.browser), a.name, f"{len(valid)}/{len(measured)}"]
                row.append(str(len(whole)))
                for metric in ("plt_ms", "fcp_ms", "lcp_ms"):
                    row += _mean_sd(store.values(cid, attempt, a.name, metric))
                rows.append(row)
    finally:
        store.close()
    return rows


def _entries(page: str) -> int:
    folder = arch.find(page)
    return len(list(arch.load(folder, check_bodies=False).entries())) if folder else -1


def pair_rows(root: Path) -> list[list[str]]:
    """h2 against each other arm of every cell, for PLT and LCP."""
    store = Store(root)
    out = []
    try:
        for cid, attempt, cfg, head in _cells(store):
            browser = {a.name: str(a.browser) for a in cfg.resolved_arms()}
            by = {m: compare_cell(store, cid, attempt, cfg, metric=m) for m in ("plt_ms", "lcp_ms")}
            for pair in by["plt_ms"]:
                row = [*head, browser[pair.split("/")[1]], pair]
                for m in ("plt_ms", "lcp_ms"):
                    cmp = by[m][pair]
                    row.append(f"{cmp.pct_diff:+.1f}" if cmp.pct_diff is not None else "-")
                    row.append(f"{cmp.welch_p:.2g}" if cmp.welch_p is not None else "-")
                out.append(row)
    finally:
        store.close()
    return out


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def tables(root: Path) -> list[str]:
    return [*_table(ARM_HEAD, arm_rows(root)), "", *_table(PAIR_HEAD, pair_rows(root)), ""]


def measure(spec_path: Path, out: Path, prefix: str) -> str:
    """Runs (or resumes) one sweep; returns its line for the head."""
    spec = load_spec(spec_path)
    tb = LocalTestbed(prefix)
    t0 = time.monotonic()
    cpu0 = hostcpu.sample_here()
    try:
        outcome = run_sweep(spec, out, testbed=tb, resume=out.exists())
    finally:
        tb.teardown()
    cpu = hostcpu.shares(cpu0, hostcpu.sample_here())
    steal = f"host steal {cpu['steal_pct']:.1f} %, busy {cpu['busy_pct']:.1f} %" if cpu else ""
    return (
        f"{spec.name}: {outcome.done} cells done, {outcome.failed} failed, "
        f"{(time.monotonic() - t0) / 60:.0f} min, {steal} over the run (results: {out})"
    )


def head_line() -> str:
    """The machine a benchmark's tables were measured on, for its head."""
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
        f"kernel {platform.release()}, nothing else running."
    )


def bench_main(
    doc: str, script: str, spec: Path, prefix: str, tables: Callable[[Path], list[str]]
) -> int:
    """A one-spec benchmark's command line: run (or resume) ``spec`` into --out, or with
    --tables-only read it, and print (and with --md write) the head and ``tables``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=spec)
    ap.add_argument("--out", type=Path, help="results folder (default: a new temporary one)")
    ap.add_argument("--md", type=Path, help="write the tables as Markdown here")
    ap.add_argument("--tables-only", action="store_true", help="only the tables of --out")
    a = ap.parse_args()
    if os.geteuid() != 0 and not a.tables_only:
        print(f"benchmarks/{script} needs root", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix=f"quicbed-{Path(script).stem}-"))
    lines = [head_line(), ""]
    if not a.tables_only:
        lines += [measure(a.spec, out, prefix), ""]
    lines += tables(out)
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["imported", "corpus", "both"], default="both")
    ap.add_argument("--out", type=Path, help="results folder (default: a new temporary one)")
    ap.add_argument("--md", type=Path, help="write the tables as Markdown here")
    ap.add_argument("--tables-only", action="store_true", help="only the tables of --out")
    a = ap.parse_args()
    if os.geteuid() != 0 and not a.tables_only:
        print("benchmarks/real_pages.py needs root", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="quicbed-real-pages-"))
    out.mkdir(parents=True, exist_ok=True)
    parts = ["imported", "corpus"] if a.part == "both" else [a.part]
    lines = [head_line(), ""]
    for part in parts:
        folder = out / part
        if not a.tables_only:
            if part == "imported":
                lines.append(record(out))
                lines.append("")
            spec = IMPORTED_SPEC if part == "imported" else CORPUS_SPEC
            lines += [measure(spec, folder, "qbreal"), ""]
        lines += [f"## {part}", "", *tables(folder)]
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
