"""Where the test suite's time went: the report at the end of ``make test``.

pytest's own ``--durations`` names the slowest tests but not what made them slow, and
the suite's budget is spent in a few kinds of work (receipts, page loads, bulk flows,
waits for a quiet host, server and browser starts: quicbed.timelog's phases) spread
over many tests. tests/conftest.py points ``QUICBED_TIME_LOG`` at a file for the
session (every quicbed process a test starts inherits it), keeps each test's reports,
and at the end prints this module's summary: the session's wall time, the time per
phase, the slowest tests each with its phases, and reruns; the same as JSON in the
test artifacts, so the run that made the suite slower says so in its own log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanes import ALONE

from quicbed import timelog

#: the slowest tests the summary names
SLOWEST = 15


@dataclass
class SpanTime:
    """One test's span (its first setup to its last teardown, reruns included) and its
    seconds per pytest stage."""

    nodeid: str
    start: float = float("inf")
    stop: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    reruns: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    slow: bool = False  # marked slow

    @property
    def seconds(self) -> float:
        return sum(self.stages.values())


class SuiteClock:
    """The reports of one session, read back with the time log at its end."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.tests: dict[str, SpanTime] = {}

    def add(self, report: Any) -> None:
        """A test report (setup, call or teardown; a rerun's too) into its test."""
        t = self.tests.setdefault(report.nodeid, SpanTime(report.nodeid))
        t.start = min(t.start, report.start)
        t.stop = max(t.stop, report.stop)
        t.stages[report.when] = t.stages.get(report.when, 0.0) + report.duration
        if report.outcome == "rerun" and report.when == "call":
            t.reruns += 1
        t.slow = "slow" in report.keywords

    def unmarked_slow(self, limit_s: float) -> list[tuple[float, str]]:
        """The tests not marked slow whose setup and call took over ``limit_s``, slowest
        first, with those seconds."""
        took = (
            (t.stages.get("setup", 0.0) + t.stages.get("call", 0.0), t.nodeid)
            for t in self.tests.values()
            if not t.slow
        )
        return sorted(((s, n) for s, n in took if s > limit_s), reverse=True)

    def _owner(self, entry: dict[str, Any], spans: list[SpanTime]) -> SpanTime | None:
        """The test a phase ran for: the one its line names (quicbed.timelog's tag, set
        per test by tests/lanes.py; the only way under pytest-xdist, where two tests'
        spans overlap), else the one whose span holds its start."""
        tag = str(entry.get("tag", "")).removesuffix(ALONE)
        if tag in self.tests:
            return self.tests[tag]
        return next((t for t in spans if t.start <= entry["start"] <= t.stop), None)

    def summary(self, wall_s: float) -> dict[str, Any]:
        """The session's time: wall, per phase (count, seconds), and the slowest tests
        with the phases that ran inside each one's span. A phase that ran outside every
        test (a session fixture's teardown) counts in the totals only."""
        entries = timelog.read(self.log)
        spans = sorted(self.tests.values(), key=lambda t: t.start)
        totals: dict[str, dict[str, float]] = {}
        for e in entries:
            tot = totals.setdefault(e["phase"], {"count": 0, "seconds": 0.0})
            tot["count"] += 1
            tot["seconds"] += e["seconds"]
            owner = self._owner(e, spans)
            if owner is not None:
                owner.phases[e["phase"]] = owner.phases.get(e["phase"], 0.0) + e["seconds"]
        ranked = sorted(spans, key=lambda t: t.seconds, reverse=True)
        files: dict[str, float] = {}
        for t in spans:
            f = t.nodeid.split("::")[0]
            files[f] = files.get(f, 0.0) + t.seconds
        order = {p: i for i, p in enumerate(timelog.PHASES)}
        return {
            "wall_s": round(wall_s, 1),
            "tests": len(spans),
            "tests_s": round(sum(t.seconds for t in spans), 1),
            "reruns": {t.nodeid: t.reruns for t in spans if t.reruns},
            "phases": {
                p: {"count": int(v["count"]), "seconds": round(v["seconds"], 1)}
                for p, v in sorted(totals.items(), key=lambda kv: order.get(kv[0], 99))
            },
            "files": {f: round(v, 1) for f, v in sorted(files.items(), key=lambda kv: -kv[1])},
            # every test, slowest first: the next change's run can be compared test by test
            "by_test": [
                {
                    "test": t.nodeid,
                    "seconds": round(t.seconds, 1),
                    "phases": {p: round(s, 1) for p, s in t.phases.items()},
                }
                for t in ranked
            ],
        }


def lines(s: dict[str, Any]) -> list[str]:
    """The summary as the terminal shows it."""
    out = [
        f"{s['tests']} tests, {s['tests_s']:.0f} s in tests, {s['wall_s']:.0f} s wall "
        f"({s['wall_s'] / 60:.1f} min)"
    ]
    if s["phases"]:
        out.append("quicbed's time by phase (every process the tests started):")
        for p, v in s["phases"].items():
            share = 100 * v["seconds"] / s["wall_s"] if s["wall_s"] else 0.0
            out.append(f"  {p:<22} {v['count']:5d} x  {v['seconds']:8.1f} s  {share:5.1f} %")
        in_phases = sum(v["seconds"] for v in s["phases"].values())
        out.append(f"  {'(outside these phases)':<22}          {s['tests_s'] - in_phases:8.1f} s")
    out.append(f"the {SLOWEST} slowest test files:")
    for f, v in list(s["files"].items())[:SLOWEST]:
        out.append(f"  {v:7.1f} s  {f}")
    out.append(f"the {SLOWEST} slowest tests (setup, call and teardown, reruns too):")
    for t in s["by_test"][:SLOWEST]:
        parts = ", ".join(f"{p} {v:.0f}" for p, v in sorted(t["phases"].items()))
        out.append(f"  {t['seconds']:7.1f} s  {t['test']}" + (f"  [{parts}]" if parts else ""))
    if s["reruns"]:
        out.append("reruns (a link or host spoiled what the test measured):")
        out += [f"  {n} x {nodeid}" for nodeid, n in s["reruns"].items()]
    return out


def write(s: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(s, indent=1) + "\n")
