"""Results on a noisy host (issue 38): the emulator's scheduling, faults caught, false alarms.

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/noisy_host.py priority [--pages 5kb,1mb] [--runs 20]
    .venv/bin/python benchmarks/noisy_host.py faults [--runs 8]
    .venv/bin/python benchmarks/noisy_host.py quiet [--loads 200]
    .venv/bin/python benchmarks/noisy_host.py demo --nuisance stall|hog

``priority``: PLT and the emulator's per-load lateness with the emulator at SCHED_FIFO
(``rt``) and at the normal policy, both in one run on one testbed: per page, one cell
of each, the order alternating per page, 10 Mbit/s and 36 ms, 1 warm-up and ``--runs``
loads per arm (h2, h3 interleaved). The cells run with a lateness tolerance no load
reaches, so that nothing is replaced and both samples are whole; the table says how
many loads the default tolerance would have flagged. Levene (Brown-Forsythe) tests
the variances, Welch the means: rt may be the default only if it is not noisier and
does not move the means.

``faults``: one cell (1 MB, 10 Mbit/s, 36 ms, h2 and h3) whose hook breaks chosen
loads as a noisy host or a careless user would: the emulator stopped (SIGSTOP) for
20 ms and for 200 ms during a load, a CPU hog on both cores beside a load, the link
re-applied at another rate behind quicbed's back. Each row says whether the fault was
caught, by what, and whether the load was replaced.

``demo``: sweeps/demo.yaml beside a nuisance: ``--nuisance stall`` stops the emulator
for 200 ms every 3 s, ``hog`` keeps every core busy for a minute, then leaves it a
minute, and so on. Every cell must end done (the spoiled loads replaced, the waits for
a quiet host counted).

``quiet``: ``--loads`` loads or more on a quiet host at the default settings (5 KB
and 100 KB cells at 10 Mbit/s and 36 ms): how many the per-load proof flagged (the
false alarms: the target is none).

Every part prints the host's steal and busy shares over its run (/proc/stat) and the
date and machine, and writes every figure to --json if given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed.link import hostcpu
from quicbed.link.hostpolicy import HostPolicy
from quicbed.link.loadproof import late_tolerance_ms
from quicbed.model.link import make_condition
from quicbed.results.linkload import figures, is_replacement, load_proof
from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.run.cell import CellResult, run_cell
from quicbed.servers.webserver import WebServer
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.spec.cellconfig import CellConfig, make_cell
from quicbed.testbed.local import LocalTestbed

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from placement_noise import compare_settings

COND = make_condition(rate_mbit=10, rtt_ms=36)
#: a tolerance no load reaches: every load kept valid, whatever its lateness
NEVER = 1e5


def runs_of(out: Path, r: CellResult) -> list[RunRow]:
    store = Store(out)
    try:
        return store.runs(r.cell_id, r.attempt)
    finally:
        store.close()


def worst_late(run: RunRow) -> float | None:
    """The latest frame of the load, either direction (ms)."""
    late: float | None = figures(load_proof(run.detail))["link_late_max_ms"]
    return late


def measure(
    cfg: CellConfig, out: Path, tb: LocalTestbed, host: HostPolicy, **kw: Any
) -> CellResult:
    """A cell, measured again (up to 3 times) when its link failed its receipt."""
    for _ in range(3):
        r = run_cell(cfg, out, testbed=tb, receipt_tcp_seconds=2, host=host, **kw)
        if r.status == "done" or not r.link_failed:
            break
    print(f"  {cfg.page}: {r.status} {r.problem}", file=sys.stderr)
    return r


def header(what: str, host_cpu: dict[str, Any] | None) -> str:
    cpu = (
        f"host steal {host_cpu['steal_pct']:.1f} %, busy {host_cpu['busy_pct']:.1f} % over the run"
        if host_cpu
        else "host CPU not read"
    )
    return (
        f"{what}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}; {cpu}"
    )


def priority(a: argparse.Namespace, tb: LocalTestbed, out: Path) -> dict[str, Any]:
    samples: dict[tuple[str, str, str], list[RunRow]] = {}
    for i, page in enumerate(a.pages.split(",")):
        cfg = make_cell(condition=COND, page=page, runs=a.runs, warmup=1)
        order = ("rt", "normal") if i % 2 == 0 else ("normal", "rt")
        for prio in order:
            host = HostPolicy(emulator_priority=prio, late_tolerance_ms=NEVER)  # type: ignore[arg-type]
            r = measure(cfg, out / f"{page}-{prio}", tb, host)
            for run in runs_of(out / f"{page}-{prio}", r):
                if not run.warmup and run.valid and run.plt_ms is not None:
                    samples.setdefault((page, prio, run.arm), []).append(run)
    print(
        "\n| page | emulator | arm | n | mean ms | sd ms | median ms | latest frame p50 / "
        "max ms | loads over the default tolerance |\n|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for (page, prio, arm), runs in sorted(samples.items()):
        v = [x.plt_ms for x in runs if x.plt_ms is not None]
        late = sorted(w for x in runs if (w := worst_late(x)) is not None)
        flagged = sum(
            (w := worst_late(x)) is not None and w > late_tolerance_ms(COND, x.plt_ms) for x in runs
        )
        print(
            f"| {page} | {prio} | {arm} | {len(v)} | {statistics.fmean(v):.1f} | "
            f"{statistics.stdev(v):.2f} | {statistics.median(v):.1f} | "
            f"{statistics.median(late):.2f} / {late[-1]:.2f} | {flagged} |"
        )
        rows.append({"page": page, "priority": prio, "arm": arm, "plt_ms": v, "late_max_ms": late})
    plts = {k: [x.plt_ms for x in v if x.plt_ms is not None] for k, v in samples.items()}
    tests = compare_settings(plts, a.pages.split(","), "rt", "normal")
    return {"rows": rows, "tests": tests}


class Faults:
    """The faults the ``faults`` part injects, each at one (arm, rep), by the cell's hook."""

    def __init__(self, tb: LocalTestbed, other_rate: float) -> None:
        self.tb, self.other_rate = tb, other_rate
        self.plan: dict[tuple[str, int], str] = {
            ("h2", 1): "emulator stopped 20 ms",
            ("h3", 2): "emulator stopped 200 ms",
            ("h2", 3): "CPU hog on both cores",
        }

    def __call__(self, arm: str, rep: int, servers: dict[str, WebServer]) -> None:
        what = self.plan.get((arm, rep))
        if what is None:
            return
        pid = UserspaceShaper().pid(self.tb)
        assert pid is not None
        if what.startswith("emulator stopped"):
            ms = int(what.split()[2])

            def stall() -> None:
                self.tb.kill("bridge", pid, "STOP")
                time.sleep(ms / 1000)
                self.tb.kill("bridge", pid, "CONT")

            threading.Timer(0.4, stall).start()
        elif what.startswith("CPU hog"):
            hog = ["timeout", "3", "sh", "-c", "while :; do :; done"]
            for _ in range(os.cpu_count() or 2):
                subprocess.Popen(self.tb.argv("bridge", hog))
        else:
            other = make_condition(rate_mbit=self.other_rate, rtt_ms=COND.rtt())
            UserspaceShaper().apply(self.tb, other, persistent=True)


def faults(a: argparse.Namespace, tb: LocalTestbed, out: Path) -> dict[str, Any]:
    """The stalls and the hog in one cell, which replaces the loads they spoiled; the
    rate changed in a second cell, which that fails (nothing after it is measured)."""
    cfg = make_cell(condition=COND, page="1mb", runs=a.runs, warmup=1)
    hook = Faults(tb, other_rate=5)
    r = run_cell(cfg, out / "faults", testbed=tb, receipt_tcp_seconds=2, fault=hook)
    runs = {(x.arm, x.rep): x for x in runs_of(out / "faults", r)}
    hook2 = Faults(tb, other_rate=5)
    hook2.plan = {("h3", 3): "rate changed behind quicbed's back"}
    cfg2 = make_cell(condition=COND, page="100kb", runs=4, warmup=1)
    r2 = run_cell(cfg2, out / "rate", testbed=tb, receipt_tcp_seconds=2, fault=hook2)
    for key, x in {(x.arm, x.rep): x for x in runs_of(out / "rate", r2)}.items():
        if key in hook2.plan:
            runs[key] = x
    hook.plan.update(hook2.plan)
    print(
        f"\ncell {r.cell_id}: {r.status}{' (' + r.problem + ')' if r.problem else ''}\n\n"
        "| fault | load | caught | by | latest frame ms | replaced |\n|---|---|---|---|---|---|"
    )
    rows = []
    for (arm, rep), what in hook.plan.items():
        run = runs.get((arm, rep))
        caught = run is not None and not run.valid
        by = run.reason if run is not None else (r.problem or "not measured")
        # the first cell's replacements per arm; the second cell fails at its fault
        repl: int | str = (
            sum(
                1
                for x in runs_of(out / "faults", r)
                if x.arm == arm and is_replacement(load_proof(x.detail))
            )
            if (arm, rep) not in hook2.plan
            else "- (the cell fails)"
        )
        late = worst_late(run) if run else None
        print(
            f"| {what} | {arm} #{rep} | {'yes' if caught else 'NO'} | {by[:160]} | "
            f"{'-' if late is None else f'{late:.1f}'} | {repl} |"
        )
        rows.append({"fault": what, "arm": arm, "rep": rep, "caught": caught, "by": by})
    print(f"\nthe second cell: {r2.status} ({r2.problem})")
    return {"cell": r.as_dict(), "rate_cell": r2.as_dict(), "rows": rows}


def quiet(a: argparse.Namespace, tb: LocalTestbed, out: Path) -> dict[str, Any]:
    loads, flagged, rows = 0, [], []
    runs_per_arm = max(10, a.loads // 4)
    for page in ("5kb", "100kb"):
        cfg = make_cell(condition=COND, page=page, runs=runs_per_arm, warmup=1)
        r = measure(cfg, out / f"quiet-{page}", tb, HostPolicy())
        for run in runs_of(out / f"quiet-{page}", r):
            if run.warmup:
                continue
            loads += 1
            if load_proof(run.detail).get("spoiled"):
                flagged.append(f"{page} {run.arm} #{run.rep}: {run.reason}")
            rows.append({"page": page, "arm": run.arm, "late_max_ms": worst_late(run)})
    print(f"\n{loads} loads on a quiet host, {len(flagged)} flagged by the per-load proof")
    for f in flagged:
        print(f"  {f}")
    return {"loads": loads, "flagged": flagged, "rows": rows}


class Nuisance(threading.Thread):
    """Beside a sweep, every ``every`` s: the emulator stopped for 200 ms (``stall``), or
    a busy process on every core for ``every`` s, then ``every`` s without (``hog``)."""

    def __init__(self, tb: LocalTestbed, kind: str, every: float) -> None:
        super().__init__(daemon=True)
        self.tb, self.kind, self.every = tb, kind, every
        self.halt = threading.Event()
        self.count = 0

    def run(self) -> None:
        while not self.halt.wait(self.every):
            if self.kind == "stall":
                pid = UserspaceShaper().pid(self.tb)
                if pid is None:
                    continue
                self.tb.kill("bridge", pid, "STOP")
                time.sleep(0.2)
                self.tb.kill("bridge", pid, "CONT")
            else:
                hog = ["timeout", str(self.every), "sh", "-c", "while :; do :; done"]
                procs = [subprocess.Popen(hog) for _ in range(os.cpu_count() or 2)]
                for p in procs:
                    p.wait()
            self.count += 1


def demo(a: argparse.Namespace, tb: LocalTestbed, out: Path) -> dict[str, Any]:
    """sweeps/demo.yaml beside a nuisance (``--nuisance stall`` or ``hog``): every cell
    must end done, the spoiled loads replaced, the waits counted."""
    from quicbed.run.sweep import run_sweep
    from quicbed.spec.sweepspec import load_spec

    spec = load_spec(Path(__file__).resolve().parent.parent / "sweeps" / "demo.yaml")
    nuisance = Nuisance(tb, a.nuisance, 3.0 if a.nuisance == "stall" else 60.0)
    nuisance.start()
    try:
        got = run_sweep(spec, out / "demo", testbed=tb)
    finally:
        nuisance.halt.set()
        nuisance.join()
    print(
        f"\ndemo sweep beside '{a.nuisance}' ({nuisance.count} times): {got.done} cells done, "
        f"{got.failed} failed; waited {got.waited_s:.0f} s for a quiet host\n\n"
        "| cell | page | rate | status | spoiled loads | replacements | waited s |\n"
        "|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in got.results:
        cfg = make_cell(**Store.open_readonly(out / "demo").cell_config(r.cell_id))
        spoiled = sum(len(v) for v in r.spoiled.values())
        repl = sum(v.get("replacements", 0) for v in r.verified.values())
        print(
            f"| {r.cell_id} | {cfg.page} | {cfg.condition.rate_mbit:g} | {r.status} | "
            f"{spoiled} | {repl} | {r.waited_s:.0f} |"
        )
        rows.append(r.as_dict())
    return {"nuisance": a.nuisance, "times": nuisance.count, "cells": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("priority", "faults", "quiet", "demo"))
    ap.add_argument("--nuisance", choices=("stall", "hog"), default="stall")
    ap.add_argument("--pages", default="5kb,1mb")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--loads", type=int, default=200)
    ap.add_argument("--json", type=Path, help="write every figure here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/noisy_host.py needs root", file=sys.stderr)
        return 2
    tb = LocalTestbed("qbnoise")
    out = Path(tempfile.mkdtemp(prefix=f"quicbed-noisy-{a.part}-"))
    before = hostcpu.sample(tb)
    t0 = time.monotonic()
    got = {"priority": priority, "faults": faults, "quiet": quiet, "demo": demo}[a.part](a, tb, out)
    host_cpu = hostcpu.shares(before, hostcpu.sample(tb))
    print(
        "\n" + header(f"part {a.part}, {time.monotonic() - t0:.0f} s, results in {out}", host_cpu)
    )
    if a.json:
        a.json.write_text(json.dumps(got | {"host_cpu": host_cpu}, default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
