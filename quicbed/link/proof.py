"""The link proven for the loads that ran on it, not only at the moment of its receipt.

A full receipt (quicbed.link.receipt) takes about half a minute; a sweep of many
cells over few link conditions would spend most of its time on them. So a receipt is
shared by the cells of one condition while the link stays exactly as it was
measured, and each use of it is proven cheaply:

- the link's *generation* (a digest of the shaping read back from the bridge: the
  emulator's PID, start time and config; the qdiscs; the Dummynet pipes) is in the
  receipt; every load records the generation it ran under, and a load under another
  generation fails its attempt;
- an *opening* spot check before a cell that reuses a receipt, and a *closing* check
  after every cell's last load: the generation, an RTT sample judged with the
  receipt's own tolerance, and the emulator's counters (they only grow while the
  emulator that was measured still runs);
- a receipt is reused for at most :data:`MAX_RECEIPT_AGE_S`; then a new one is taken.

Each attempt stores, per receipt it used, the span of loads it covers and both
checks (``Store.add_link_span``), so a reader can tell which receipt proves which load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from quicbed import timelog
from quicbed.errors import QuicbedError
from quicbed.link import hostcpu
from quicbed.link.quiet import HostWait, Settled
from quicbed.link.receipt import Check, Receipt, measure, rtt_check, unjudged
from quicbed.link.session import ShapedLink

#: the longest a receipt proves a link for (drift of the host, other load on it)
MAX_RECEIPT_AGE_S = 30 * 60
#: pings of a spot check: 50 at 10 ms (the receipt's spacing), 0.5 s plus one RTT
SPOT_PINGS = 50
#: a passed closing check this recent serves as the next cell's opening check (with the
#: generation read again): nothing ran on the link in between but quicbed's own set-up
REUSE_CLOSING_S = 60.0


class LinkFailure(QuicbedError):
    """The link is not the one measured: out of tolerance, or changed since its receipt.

    A sweep retries such a cell once on a freshly applied link; any other failure is
    the cell's own.
    """


class SpotCheck(BaseModel):
    """A short check that the link is still the one its receipt measured."""

    kind: str  # opening | closing
    created: str
    generation: str
    expected_generation: str | None
    rtt: Check
    counters: dict[str, Any] | None
    problems: list[str]
    passed: bool
    #: set when this is an earlier check reused: which one, and how long ago (s)
    reused: dict[str, Any] | None = None


@dataclass
class ProvenLink:
    """A shaped link and the receipt that proves it, shared by the cells of one condition."""

    link: ShapedLink
    receipt: Receipt
    measured_at: float  # time.monotonic() when the receipt was taken
    uses: int = 0
    #: the last passed closing check on this link, and when (time.monotonic())
    last_closing: tuple[float, SpotCheck] | None = None

    @property
    def generation(self) -> str:
        return self.receipt.generation or ""

    def age_s(self) -> float:
        return time.monotonic() - self.measured_at

    def current_generation(self) -> str:
        return self.link.shaper.generation(self.link.testbed)


#: the emulator's counters that only ever grow (its percentiles and maxima need not)
MONOTONIC = (
    "rx_packets",
    "rx_bytes",
    "loss_drops",
    "queue_drops",
    "tx_packets",
    "tx_bytes",
    "send_errors",
    "socket_drops",
    "reordered",
)


def _grew(now: dict[str, Any] | None, then: dict[str, Any] | None) -> list[str]:
    """Counters that went down since ``then``: the emulator was restarted or replaced."""
    if not now or not then:
        return []
    bad = []
    for d, c in (then.get("directions") or {}).items():
        for k in MONOTONIC:
            v, cur = c.get(k), (now.get("directions") or {}).get(d, {}).get(k)
            if isinstance(v, int | float) and isinstance(cur, int | float) and cur < v:
                bad.append(f"{d}.{k} {v} -> {cur}")
    return bad


def opening_check(proven: ProvenLink) -> SpotCheck:
    """Before a cell that reuses a receipt: the previous cell's closing check if it passed
    less than REUSE_CLOSING_S ago and the generation is still the receipt's; else a new
    spot check."""
    if proven.last_closing is not None:
        at, closing = proven.last_closing
        age = time.monotonic() - at
        gen = proven.current_generation()
        if age <= REUSE_CLOSING_S and gen == proven.generation:
            return closing.model_copy(
                update={
                    "kind": "opening",
                    "generation": gen,
                    "reused": {"check": "closing", "created": closing.created, "age_s": age},
                }
            )
    return spot_check(proven, "opening")


@timelog.phase(timelog.SPOT_CHECK)
def spot_check(proven: ProvenLink, kind: str, since: dict[str, Any] | None = None) -> SpotCheck:
    """Generation, RTT and counters now, against the receipt (about 1 s)."""
    tb, cond, shaper = proven.link.testbed, proven.link.condition, proven.link.shaper
    problems = []
    gen = shaper.generation(tb)
    if gen != proven.generation:
        problems.append(
            f"the link changed since its receipt (generation {proven.generation} -> {gen})"
        )
    rtt = rtt_check(tb, cond, SPOT_PINGS, spot=True)
    if not shaper.shapes:  # an unshaped link: its RTT is whatever it is; nothing may shape
        rtt = unjudged(rtt)
        problems += shaper.shaping(tb)
    if rtt.passed is False:
        got = "nothing" if rtt.measured is None else f"{rtt.measured:.2f} ms"
        problems.append(
            f"RTT {got}, expected {rtt.expected:.2f} ms +/- "
            f"{(rtt.high or 0) - (rtt.expected or 0):.2f}"
        )
    counters = shaper.counters(tb)
    floor = since or (proven.receipt.emulator or {}).get("counters_after")
    went_down = _grew(counters, floor)
    if went_down:
        problems.append(f"the emulator's counters went down ({', '.join(went_down[:3])})")
    check = SpotCheck(
        kind=kind,
        created=datetime.now(UTC).isoformat(),
        generation=gen,
        expected_generation=proven.generation,
        rtt=rtt,
        counters=counters,
        problems=problems,
        passed=not problems,
    )
    if kind == "closing" and check.passed:
        proven.last_closing = (time.monotonic(), check)
        proven.link.record_closing(check.model_dump(mode="json"), gen)
    return check


#: how often a failed receipt is taken again after a wait for a quiet host
RECEIPT_RETRIES = 3


def prove(
    shaped: ShapedLink, tcp_seconds: float, cc: str, wait: HostWait | None = None
) -> ProvenLink:
    """A full receipt of ``shaped`` as it is now. With ``wait``: a receipt that fails
    while the host is busy (quicbed.link.quiet) is taken again once the host is quiet,
    up to RECEIPT_RETRIES times and the wait's limit, as is one whose own span lost
    CPU time to steal or saw the emulator fall behind; one that fails on a quiet host
    (the link itself is wrong) or past the limit is returned as it is.

    The testbed's kept link (quicbed.link.kept) is proven by its recorded receipt while
    that is younger than MAX_RECEIPT_AGE_S and the shaping still reads back as the
    generation it measured: a receipt other commands used, so each cell on it opens
    with a spot check (``uses``). A receipt taken of a kept link is recorded for the
    commands after this one."""
    rec = shaped.kept_record
    if rec is not None:
        age = rec.age_s()
        gen = shaped.shaper.generation(shaped.testbed)
        if rec.receipt.passed and age <= MAX_RECEIPT_AGE_S and gen == rec.generation:
            proven = ProvenLink(shaped, rec.receipt, time.monotonic() - age, uses=1)
            if rec.closing is not None and rec.closing_unix is not None:
                ago = time.time() - rec.closing_unix
                proven.last_closing = (
                    time.monotonic() - ago,
                    SpotCheck.model_validate(rec.closing),
                )
            return proven
    for tries in range(RECEIPT_RETRIES + 1):
        receipt = measure(
            shaped.testbed,
            shaped.condition,
            shaped.shaper,
            shaped.tuning,
            tcp_seconds=tcp_seconds,
            cc=cc,
        )
        if receipt.passed or wait is None or tries == RECEIPT_RETRIES:
            break
        names = "; ".join(c.summary() for c in receipt.failed_checks())
        settled = wait.settle(shaped.testbed, f"receipt out of tolerance ({names})")
        # a receipt a probe of which the host spoiled on every take (steal, or the
        # emulator falling behind: quicbed.link.receipt retakes such a probe) was spoiled
        # by the host even where the host is quiet again by now
        stolen = receipt.spoiled_by_host
        if not receipt.probes:  # a shaper whose receipt keeps no per-probe figures
            stolen = bool(hostcpu.blame(receipt.host_cpu))
        if settled is Settled.BUSY or (settled is Settled.QUIET and not stolen):
            break
        if settled is Settled.QUIET and not wait.pause("the receipt was spoiled by the host"):
            break
    shaped.record_kept(receipt)
    return ProvenLink(shaped, receipt, time.monotonic())
