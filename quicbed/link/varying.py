"""A varying link's receipt: what replaces the checks a constant rate makes possible.

On a link that follows a trace or a schedule there is no one rate to judge TCP's or
UDP's delivery against, and a probe's delay includes its wait for the next delivery
opportunity. So the receipt judges instead (docs/varying-links.md):

- **capacity**, per direction: UDP offered at 1.5 x the trace's (or schedule's) peak
  over 100 ms keeps the queue full; over a window of it, the bytes that left the
  bottleneck (the emulator's counter) against the bytes the trace allows over the
  same part of it (computed here from the trace file itself, from the positions the
  emulator reports): at least :data:`MIN_USED_PCT` % of them, and never more than
  the trace allows (one opportunity's slack);
- **RTT** by its minimum: within the range of base RTTs the condition passes
  through (a trace's one; a schedule's steps'), widened by the waits for an
  opportunity a ping can meet.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

from quicbed.link import probes
from quicbed.link.loadproof import CAPACITY_SLACK_BYTES, capacity_facts
from quicbed.model import capacity
from quicbed.model.link import LinkCondition
from quicbed.shapers.shaper import Shaper
from quicbed.testbed.lifecycle import Testbed

#: a saturated window must carry at least this share of what the trace allows (%)
MIN_USED_PCT = 95.0
#: the capacity probe: UDP at this multiple of the peak rate over PEAK_WINDOW_MS
OVERLOAD, PEAK_WINDOW_MS = 1.5, 100
#: the most the probe offers (bit/s of payload): what iperf3 sends on these veths
MAX_OFFERED_BPS = 1.5e9
#: seconds the queue is given to fill before the window, and the window's bounds
SETTLE_S, MIN_WINDOW_S, MAX_WINDOW_S = 1.0, 3.0, 5.0
PAYLOAD = 1200
#: why the constant-rate checks are not judged on a varying link
NOT_CONSTANT = "not judged: the link's capacity varies (its capacity check judges it)"


def peak_mbit(cond: LinkCondition, direction: str) -> float:
    """The most the link carries over PEAK_WINDOW_MS (a schedule's fastest step)."""
    if cond.trace is not None:
        return capacity.peak_mbit(capacity.load(cond.trace).offsets(direction), PEAK_WINDOW_MS)
    assert cond.schedule is not None
    return max(s.rate_mbit for s in capacity.parse_schedule(cond.schedule))


def slowest_mean_bps(cond: LinkCondition) -> float:
    """The lower of the two directions' mean rates (bit/s): what a probe that must not
    fill the queue (the receipt's delay and loss stream) is paced against."""
    if cond.trace is not None:
        t = capacity.load(cond.trace)
        return min(t.mean_mbit(d) for d in capacity.DIRECTIONS) * 1e6
    assert cond.schedule is not None
    return capacity.schedule_mean_mbit(capacity.parse_schedule(cond.schedule)) * 1e6


def span_rate_bps(
    cond: LinkCondition,
    restarted: dict[str, Any] | None,
    direction: str,
    t0_ns: int,
    t1_ns: int,
) -> float | None:
    """The link's rate in ``direction`` over a span on the client's wall clock (Unix ns),
    for a background flow's share of it: a constant link's rate; a varying link's bytes
    its trace allowed over that span, placed by the epoch the emulator reported when it
    was restarted before the load (``restarted``: its counters then), where that epoch
    is on the same wall clock (the local testbed: one host); else its mean rate."""
    if cond.varying() is None:
        return None if cond.rate_mbit is None else cond.rate_mbit * 1e6
    cap = ((restarted or {}).get("directions", {}).get(direction) or {}).get("capacity") or {}
    epoch = cap.get("epoch_unix_ns")
    mean = cond.mean_rate_mbit()
    if not epoch or t1_ns <= t0_ns:
        return None if mean is None else mean * 1e6
    p0, p1 = (t0_ns - epoch) / 1000, (t1_ns - epoch) / 1000
    allowed = capacity.available_bytes(cond.trace, cond.schedule, direction, p0, p1)
    return allowed * 8 / ((t1_ns - t0_ns) / 1e9)


def rtt_range(cond: LinkCondition) -> tuple[float, float, float]:
    """(lowest, highest) base RTT the link passes through (ms) and the longest usual
    wait for a small packet's opportunity on one direction (ms): a trace's median gap
    between distinct opportunity times; a schedule's time to send a ping at its
    slowest step with a rate."""
    if cond.trace is not None:
        t = capacity.load(cond.trace)
        waits = []
        for d in capacity.DIRECTIONS:
            times = sorted(set(t.offsets(d)))
            gaps = [b - a for a, b in itertools.pairwise(times)] or [times[0]]
            waits.append(statistics.median(gaps))
        return cond.rtt(), cond.rtt(), max(waits)
    assert cond.schedule is not None
    steps = capacity.parse_schedule(cond.schedule)
    rtts = [cond.rtt() if s.rtt_ms is None else s.rtt_ms for s in steps]
    slowest = min(s.rate_mbit for s in steps if s.rate_mbit > 0)
    return min(rtts), max(rtts), 98 * 8 / (slowest * 1e6) * 1000


def rtt_check(cond: LinkCondition, pr: dict[str, Any], *, spot: bool) -> dict[str, Any]:
    """The RTT check's fields on a varying link: the minimum ping within the base RTTs'
    range, widened by max(1 ms, 2 %) (a spot check's max(2 ms, 5 %)) and two waits per
    direction."""
    lo, hi, wait = rtt_range(cond)
    floor, rel = (2.0, 0.05) if spot else (1.0, 0.02)
    tol = max(floor, rel * hi) + 4 * wait
    measured = pr.get("min_ms")
    return {
        "expected": lo,
        "measured": measured,
        "low": max(0.0, lo - max(floor, rel * lo)),
        "high": hi + tol,
        "passed": measured is not None and lo - max(floor, rel * lo) <= measured <= hi + tol,
        "note": f"the minimum RTT, within the varying link's base RTTs {lo:g}-{hi:g} ms and "
        f"the waits for an opportunity (up to {wait:g} ms each way)",
    }


def capacity_take(
    tb: Testbed, shaper: Shaper, cond: LinkCondition, direction: str
) -> dict[str, Any]:
    """One capacity probe of ``direction``: the trace restarted, UDP at OVERLOAD x its
    peak, and the emulator's counters read over a window once the queue has filled."""
    offered = min(MAX_OFFERED_BPS, OVERLOAD * peak_mbit(cond, direction) * 1e6)
    period_s = _period_s(cond, direction)
    window = min(MAX_WINDOW_S, max(MIN_WINDOW_S, period_s))
    seconds = int(SETTLE_S + window + 2)
    shaper.restart(tb)
    got: dict[str, Any] = {}

    def flood() -> None:
        try:
            got["udp"] = probes.udp(
                tb, direction, bitrate_bps=offered, seconds=seconds, length=PAYLOAD
            )
        except BaseException as exc:  # reported below, in the caller's thread
            got["error"] = exc

    th = threading.Thread(target=flood, daemon=True)
    th.start()
    time.sleep(SETTLE_S + 0.5)  # iperf3 connects, the queue fills
    c0 = shaper.counters(tb)
    time.sleep(window)
    c1 = shaper.counters(tb)
    th.join(timeout=seconds + 60)
    if "error" in got:
        raise got["error"]
    facts = None
    if c0 and c1:
        facts = capacity_facts(
            cond, direction, c0["directions"][direction], c1["directions"][direction]
        )
    return {"offered_bps": offered, "window_s": window, "facts": facts, "udp": got.get("udp")}


def _period_s(cond: LinkCondition, direction: str) -> float:
    if cond.trace is not None:
        return capacity.load(cond.trace).offsets(direction)[-1] / 1000
    assert cond.schedule is not None
    return sum(s.duration_ms for s in capacity.parse_schedule(cond.schedule)) / 1000


def capacity_check_fields(direction: str, take: dict[str, Any]) -> dict[str, Any]:
    """The capacity check's fields from one take: the share of the trace's bytes the
    saturated window carried, judged at least MIN_USED_PCT and never over the trace."""
    f = take["facts"]
    if f is None:
        return {
            "high": None,
            "measured": None,
            "passed": False,
            "note": "the emulator reported no position in its trace (restarted meanwhile, "
            "or too old: make setup)",
        }
    over = f["served_bytes"] > f["available_bytes"] + CAPACITY_SLACK_BYTES
    high = 100 * (1 + CAPACITY_SLACK_BYTES / f["available_bytes"]) if f["available_bytes"] else None
    return {
        "high": None if high is None else round(high, 3),
        "measured": f["used_pct"],
        "passed": f["used_pct"] is not None and f["used_pct"] >= MIN_USED_PCT and not over,
        "note": (
            f"{direction}: {f['served_bytes']} bytes left the bottleneck over "
            f"{f['from_ms']:.0f}-{f['to_ms']:.0f} ms of the {f['kind']}, which allows "
            f"{f['available_bytes']} (UDP offered at {take['offered_bps'] / 1e6:.1f} Mbit/s)"
            + ("; MORE than the trace allows" if over else "")
        ),
    }
