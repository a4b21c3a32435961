"""Every load proven by the emulator's own clock, not only the link around the cell.

A receipt proves the link before a cell's loads and a spot check after them; neither
sees a load during which the emulator fell behind (its process stopped, its thread
descheduled, the hypervisor stealing the core). Such a load measured the stall, not
the protocol. So around every load (and every bulk or compete flow) the runner takes
the userspace emulator's counters twice and judges what the link did *during that
load alone*:

- **lateness**: how long after its scheduled release each frame left (the emulator
  stamps a frame's arrival with the kernel's receive time, so a frame that waited in
  the socket while the emulator stalled is late too). Its coarse histogram is
  cumulative; two snapshots subtracted give this load's frames. A load whose latest
  frame left more than :func:`late_tolerance_ms` late is spoiled;
- **drops the model did not ask for**: frames the kernel dropped before the emulator
  read them (socket drops) and failed sends. The model's own drops (loss, a full
  queue) are counted, not judged: they are the link;
- **reordering where the jitter kind allows none** (no jitter, or ``smooth``);
- **the host's CPU** over the load (/proc/stat on the bridge's machine): busy and
  steal shares; a load that lost more than :data:`STEAL_SPOILS_PCT` of the host's
  time to steal is spoiled (the browser and servers lost it too). On the local
  testbed, where the three roles share the machine, also the *other work*: the host's
  busy time less what the load's own server, browser and emulator used (their
  control groups, quicbed.run.loadcpu); a load beside which other work took more than
  :data:`OTHER_SPOILS_PCT` of the machine is spoiled too (a build, a second sweep, a
  hog: the emulator at SCHED_FIFO keeps its time, the browser and servers do not).

A spoiled load is stored invalid with the figure named, kept, and replaced at the end
of the cell (quicbed.run.cell). The kernel's shapers (netem, Dummynet) keep no
per-frame clock: there the proof says so, and only the host's CPU is judged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.link import hostcpu
from quicbed.model import capacity, mahimahi
from quicbed.model.link import JitterKind, LinkCondition
from quicbed.shapers.shaper import Shaper
from quicbed.testbed.lifecycle import Testbed

#: a load that lost more of the host's CPU time than this to steal is spoiled (%)
STEAL_SPOILS_PCT = 10.0
#: a load beside which work outside its own roles took more of the host than this is
#: spoiled (%; the local testbed only). Measured loads of the demo sweep saw up to 18 %
#: (the controller, capture, kernel work no group is charged for); a busy loop per core
#: beside a load 79-80 %
OTHER_SPOILS_PCT = 30.0
#: the lateness tolerance (late_tolerance_ms): its floor, and the share of the base RTT
#: that raises it on long paths
LATE_FLOOR_MS, LATE_SHARE_OF_RTT = 15.0, 0.10
#: the counters a model drop does not explain: frames lost before the model saw them
UNASKED_DROPS = ("socket_drops", "send_errors")
#: every counter stored per direction and load
COUNTED = ("tx_packets", "loss_drops", "queue_drops", "reordered", *UNASKED_DROPS)


def late_tolerance_ms(cond: LinkCondition, given: float | None = None) -> float:
    """How late a load's latest frame may leave (ms): ``given``, else 15 ms, or 10 % of
    the base RTT where that is more.

    The floor is this machine's quiet host with a margin (docs/benchmarks/
    noisy-host.md): over 563 loads of 5 KB to 1 MB at 36 ms, with no fault and no steal,
    the latest frame of a load left at most 12 ms late (the emulator's threads and the
    virtual CPU hiccup now and then), while an emulator stopped for 20 ms shows as
    18-20 ms and one stopped for 200 ms as 190-200 ms. A frame late by L moves the PLT
    by at most about L; on long paths a tenth of the RTT moves it little."""
    if given is not None:
        return check_late_tolerance(given)
    return max(LATE_FLOOR_MS, LATE_SHARE_OF_RTT * cond.rtt())


def check_late_tolerance(ms: float, what: str = "--late-tolerance") -> float:
    """A lateness tolerance in ms: a number > 0."""
    if not isinstance(ms, int | float) or ms != ms or not 0 < ms < 1e6:
        raise QuicbedError(
            f"{what} {ms!r}: how late a load's latest frame may leave the link emulator, in "
            "ms (a number > 0)"
        )
    return float(ms)


def hist_delta(after: list[list[int]] | None, before: list[list[int]] | None) -> dict[int, int]:
    """The frames per lateness bucket (lower edge us) sent between two snapshots."""
    got = {int(low): int(n) for low, n in after or []}
    for low, n in before or []:
        got[int(low)] = got.get(int(low), 0) - int(n)
    return {low: n for low, n in sorted(got.items()) if n > 0}


def percentile_us(hist: dict[int, int], q: float) -> int | None:
    """The q-quantile's bucket (its lower edge, us: a lateness at least this), or None."""
    total = sum(hist.values())
    if not total:
        return None
    rank, acc = max(1, -(-total * q // 1)), 0
    for low, n in hist.items():
        acc += n
        if acc >= rank:
            return low
    return max(hist)


def direction_facts(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """One direction's figures for the frames between two of its snapshots."""
    facts: dict[str, Any] = {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in COUNTED}
    hist = hist_delta(after.get("late_hist"), before.get("late_hist"))
    for name, q in (("late_p50_ms", 0.5), ("late_p99_ms", 0.99)):
        v = percentile_us(hist, q)
        facts[name] = None if v is None else v / 1000
    facts["late_max_ms"] = max(hist) / 1000 if hist else None
    facts["late_hist"] = [[low, n] for low, n in hist.items()]
    return facts


@dataclass
class Verdict:
    """A load's proof: the facts to store and why the load is spoiled (empty: it held)."""

    facts: dict[str, Any]
    reasons: list[str]

    @property
    def spoiled(self) -> bool:
        return bool(self.reasons)

    @property
    def host_spoiled(self) -> bool:
        """Spoiled by the host (steal, or the emulator falling behind), so worth waiting
        for a quiet host before the next load."""
        return bool(self.facts.get("host_spoiled"))


@dataclass
class _Findings:
    """Why a load is spoiled, and whether the host is to blame: the link's judges and the
    host's each add to them, and the blame decides whether the next load waits for a
    quiet host (Verdict.host_spoiled)."""

    reasons: list[str] = field(default_factory=list)
    host_spoiled: bool = False

    def add(self, reason: str, *, by_host: bool) -> None:
        self.reasons.append(reason)
        self.host_spoiled = self.host_spoiled or by_host


def judge(
    cond: LinkCondition,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    host: dict[str, Any] | None,
    tolerance_ms: float,
) -> Verdict:
    """A load's verdict from the emulator's counters before and after it (None: a shaper
    without them) and the host's CPU shares over it."""
    facts: dict[str, Any] = {"late_tolerance_ms": tolerance_ms, "host": host}
    found = _Findings()
    if before and after:
        facts["directions"] = _judge_link(cond, before, after, tolerance_ms, found)
        facts["source"] = "the link emulator's counters around the load"
        if "late_hist" not in after["directions"]["down"]:
            facts["source"] = "the link emulator predates per-load lateness (make setup)"
    else:
        facts["source"] = "none: this shaper keeps no per-frame clock; only the host is judged"
    _judge_host(host, found)
    facts["host_spoiled"] = found.host_spoiled
    facts["spoiled"] = bool(found.reasons)
    return Verdict(facts, found.reasons)


def _judge_link(
    cond: LinkCondition,
    before: dict[str, Any],
    after: dict[str, Any],
    tolerance_ms: float,
    found: _Findings,
) -> dict[str, dict[str, Any]]:
    """Each direction's figures over the load, judged by the emulator's own clock and
    counters, which alone see a stall inside the load; returns the figures to store."""
    dirs = {}
    for d in ("down", "up"):
        b, a = before["directions"][d], after["directions"][d]
        f = direction_facts(a, b)
        f["rx_timestamps"] = bool(a.get("rx_timestamps"))
        cap = capacity_facts(cond, d, b, a)
        if cap is not None:
            f["capacity"] = cap
            if cap["served_bytes"] > cap["available_bytes"] + CAPACITY_SLACK_BYTES:
                found.add(
                    f"the link carried {cap['served_bytes']} bytes {d} during this load where "
                    f"its {cap['kind']} allows {cap['available_bytes']} "
                    f"({cap['from_ms']:.0f}-{cap['to_ms']:.0f} ms of it)",
                    by_host=False,
                )
        elif cond.varying() is not None:
            found.add(
                f"the link's {cond.varying()} was restarted during this load, or its emulator "
                "keeps no position: the load cannot be placed in it",
                by_host=False,
            )
        dirs[d] = f
        _judge_direction(cond, d, f, tolerance_ms, found)
    return dirs


def capacity_facts(
    cond: LinkCondition, d: str, before: dict[str, Any], after: dict[str, Any]
) -> dict[str, Any] | None:
    """A varying link's direction between two snapshots: where in its trace or schedule
    it ran (ms from the start it was last restarted at), the bytes that left the
    bottleneck and the bytes the trace or schedule allowed meanwhile (computed here from
    the trace itself, not taken from the emulator). None: a constant link, or an
    emulator restarted in between (its positions then belong to two runs)."""
    b, a = before.get("capacity"), after.get("capacity")
    if cond.varying() is None or not b or not a or a["restarts"] != b["restarts"]:
        return None
    p0, p1 = b["position_us"], a["position_us"]
    avail = capacity.available_bytes(cond.trace, cond.schedule, d, p0, p1)
    served = a["served_bytes"] - b["served_bytes"]
    return {
        "kind": a["kind"],
        "from_ms": p0 / 1000,
        "to_ms": p1 / 1000,
        "period_ms": a["period_us"] / 1000,
        "served_bytes": served,
        "available_bytes": round(avail),
        "used_pct": round(100 * served / avail, 2) if avail else None,
    }


#: what a varying link may carry beyond its trace's bytes between two snapshots: one
#: opportunity's worth (a frame that began on an opportunity before the first snapshot)
CAPACITY_SLACK_BYTES = mahimahi.OPPORTUNITY_BYTES + 14


def _judge_direction(
    cond: LinkCondition, d: str, f: dict[str, Any], tolerance_ms: float, found: _Findings
) -> None:
    """A late frame or a frame lost outside the model means the emulator fell behind, the
    host's doing; reordering where the jitter kind makes none spoils the load as well,
    but is not put down to the host."""
    late = f["late_max_ms"]
    if late is not None and late > tolerance_ms:
        found.add(
            f"the link was {late:.1f} ms late during this load ({d}: its latest frame "
            f"left {late:.1f} ms after its time, p99 {f['late_p99_ms']:.1f} ms; "
            f"tolerance {tolerance_ms:g} ms)",
            by_host=True,
        )
    unasked = {k: f[k] for k in UNASKED_DROPS if f[k] > 0}
    if unasked:
        found.add(
            f"the emulator lost {sum(unasked.values())} frame(s) the model did not drop "
            f"during this load ({d}: "
            + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in unasked.items())
            + ")",
            by_host=True,
        )
    if f["reordered"] > 0 and cond.jitter_kind in (JitterKind.none, JitterKind.smooth):
        found.add(
            f"the link reordered {f['reordered']} frame(s) during this load ({d}) "
            f"where its jitter ({cond.jitter_kind.value}) reorders none",
            by_host=False,
        )


def _judge_host(host: dict[str, Any] | None, found: _Findings) -> None:
    """The host's CPU over the load, judged on every shaper (the kernel's keep no
    per-frame clock): other work beside the load and steal take time from the browser
    and servers as well as from the emulator."""
    other = (host or {}).get("other_pct")
    if other is not None and other > OTHER_SPOILS_PCT:
        found.add(
            f"other work took {other:.0f} % of the host's CPU beside this load (its own "
            f"server, browser and emulator excepted; tolerance {OTHER_SPOILS_PCT:g} %)",
            by_host=True,
        )
    steal = (host or {}).get("steal_pct")
    if steal is not None and steal > STEAL_SPOILS_PCT:
        found.add(
            f"the host lost {steal:.0f} % of its CPU time to steal during this load "
            f"(tolerance {STEAL_SPOILS_PCT:g} %)",
            by_host=True,
        )


class LoadWatch:
    """The link read around one load or flow: ``begin`` before it, ``end`` after."""

    def __init__(
        self, tb: Testbed, shaper: Shaper, cond: LinkCondition, tolerance_ms: float | None
    ) -> None:
        """``tolerance_ms``: the user's, else the load's own (late_tolerance_ms)."""
        self.tb, self.shaper, self.cond, self.tolerance_ms = tb, shaper, cond, tolerance_ms
        self.before: dict[str, Any] | None = None
        #: the emulator's counters when the load ended (None: not read, or no emulator)
        self.after: dict[str, Any] | None = None
        self.cpu_before: list[int] | None = None

    def begin(self) -> None:
        """Read the link before the load; a varying link's trace or schedule starts again
        here, so every load meets the same part of it."""
        if not self.shaper.shapes:
            self.before = None
        elif self.cond.varying() is not None:
            self.before = self.shaper.restart(self.tb)
        else:
            self.before = self.shaper.counters(self.tb)
        self.cpu_before = hostcpu.sample(self.tb)

    def end(self, own_cpu_ms: float | None = None) -> Verdict:
        """The verdict; ``own_cpu_ms``: the CPU the load's own roles used over it (its
        server, browser and emulator), on a testbed whose roles share the bridge's
        machine, so the rest of the host's busy time is other work."""
        after = self.after = self.shaper.counters(self.tb) if self.before is not None else None
        host = hostcpu.shares(self.cpu_before, hostcpu.sample(self.tb))
        if host:
            host = {k: v for k, v in host.items() if k != "source"}
            if own_cpu_ms is not None:
                host["other_pct"] = other_pct(host, own_cpu_ms)
        tol = late_tolerance_ms(self.cond, self.tolerance_ms)
        return judge(self.cond, self.before, after, host, round(tol, 2))


def other_pct(host: dict[str, Any], own_cpu_ms: float) -> float:
    """The share of the host's CPU time (%) that was busy with other work than
    ``own_cpu_ms``: busy ticks less the load's own CPU, over all ticks."""
    all_ms = float(host["ticks"]) * 1000.0 / float(os.sysconf("SC_CLK_TCK"))
    busy_ms = float(host["busy_pct"]) / 100 * all_ms
    return round(max(0.0, busy_ms - own_cpu_ms) / all_ms * 100, 2)
