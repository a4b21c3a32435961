"""Wait for a quiet host instead of failing: the one rule for receipts, checks and loads.

On a shared virtual machine the hypervisor's steal comes and goes within minutes
(here: 0 % for ten minutes, then 13-41 % for the next ten), and other work on the
machine (a build, a second sweep) takes the emulator's CPU the same way. A receipt,
a spot check or a load spoiled by it has measured the host, not the link; failing
is honest, but what the user needs is to wait and measure again.

So whenever one of them is spoiled, the runner asks :meth:`HostWait.settle`: the
machine is judged *under load* (quicbed.link.cpuprobe: one busy process per core for
:data:`PROBE_S`; an idle machine can read little steal while a busy one loses a
quarter of its time), and while it gives its spinners less than
:data:`QUIET_AVAILABLE_PCT` of the cores, the runner pauses (10 s, doubling to 60 s)
and asks again, up to the cell's limit. Past the limit the cell fails naming the
wait (``host-busy``; a resume measures it again). Every wait is counted in the
attempt (``waited_s``) and the sweep's summary.

A cell whose own steady work runs beside its loads (a page cell's background flows,
quicbed.run.background, and the emulator carrying them) takes part of the cores from
the spinners itself: its CPU over the probe (``HostWait.own_cpu_ns``, read from its
control groups) is the cell's, not the host's, and is credited to the probe
(:func:`credited`). Without it a cell beside a 50 Mbit/s download waited its whole
limit for a host that was busy only with the cell.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quicbed import timelog
from quicbed.errors import QuicbedError
from quicbed.testbed.lifecycle import Testbed

#: how long the probe keeps every core busy (s)
PROBE_S = 2.0
#: a quiet host gives its busy spinners at least this share of the cores' time (%):
#: here a quiet machine gives 97-100 %; 20 % steal or one core's worth of other work
#: leave 50-80 %
QUIET_AVAILABLE_PCT = 90.0
#: the cell's default limit on waiting (minutes): a spell of steal here lasts minutes
DEFAULT_WAIT_MINUTES = 10.0
#: the pauses between probes: the first, then doubled up to the last
FIRST_PAUSE_S, MAX_PAUSE_S = 10.0, 60.0


class Settled(enum.Enum):
    """How :meth:`HostWait.settle` ended."""

    QUIET = "quiet"  # the host was quiet when asked: whatever was spoiled, it was not now
    AFTER_WAIT = "after-wait"  # it was busy, and quiet again after a wait: measure again
    BUSY = "busy"  # it stayed busy until the cell's limit was spent


def check_wait_minutes(minutes: float, what: str = "--quiet-wait") -> float:
    """A wait limit in minutes: a number >= 0 (0: never wait, fail at once as before)."""
    if not isinstance(minutes, int | float) or minutes != minutes or not 0 <= minutes < 1e6:
        raise QuicbedError(
            f"{what} {minutes!r}: the longest wait for a quiet host, in minutes (a number "
            ">= 0; 0 never waits)"
        )
    return float(minutes)


def probe(tb: Testbed) -> dict[str, Any] | None:
    """The bridge's machine under load (quicbed.link.cpuprobe), or None where it cannot
    run (a host without Python's multiprocessing or /proc: a FreeBSD Dummynet node)."""
    cp = tb.on_host("bridge", [*tb.python("bridge"), "-m", "quicbed.link.cpuprobe", str(PROBE_S)])
    if cp.returncode != 0:
        return None
    try:
        got: dict[str, Any] = json.loads(cp.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return got


def is_quiet(found: dict[str, Any] | None) -> bool:
    """A probe's verdict; a host that cannot be probed counts as quiet (nothing to wait
    for that could be seen)."""
    return found is None or found.get("available_pct", 100.0) >= QUIET_AVAILABLE_PCT


def credited(found: dict[str, Any], own_ns: int) -> dict[str, Any]:
    """A probe with the cell's own CPU over it (``own_ns``) given back: the spinners'
    share as measured (``spinners_pct``), the cell's own share of the cores
    (``own_pct``), and ``available_pct`` their sum, at most 100."""
    own = 100 * own_ns / 1e9 / (found["wall_s"] * found["cpus"])
    got = found["available_pct"]
    return {
        **found,
        "spinners_pct": got,
        "own_pct": round(own, 2),
        "available_pct": round(min(100.0, got + own), 2),
    }


def describe(found: dict[str, Any] | None) -> str:
    """A probe in words, for progress lines and failures."""
    if found is None:
        return "the host could not be probed"
    steal = found.get("steal_pct")
    own = found.get("own_pct")
    return (
        f"{found['available_pct']:.0f} % of the CPU available"
        + (f" ({own:.0f} % of it the cell's own background)" if own else "")
        + (f", {steal:.0f} % steal" if steal is not None else "")
    )


@dataclass
class HostWait:
    """One cell's budget of waiting for a quiet host, and what it spent."""

    limit_s: float = DEFAULT_WAIT_MINUTES * 60
    say: Callable[[str], None] | None = None
    waited_s: float = 0.0
    #: every probe taken: (seconds into the wait, the probe)
    probes: list[dict[str, Any]] = field(default_factory=list)
    last: dict[str, Any] | None = None
    #: the cell's own steady work beside its loads (a page cell's background flows and
    #: the emulator carrying them): a reader of its CPU so far (ns), credited to every
    #: probe (:func:`credited`); None: the cell has none
    own_cpu_ns: Callable[[], int] | None = None

    def _probe(self, tb: Testbed) -> dict[str, Any] | None:
        """The host under load, the cell's own work over the probe given back."""
        if self.own_cpu_ns is None:
            return probe(tb)
        before = self.own_cpu_ns()
        found = probe(tb)
        return None if found is None else credited(found, self.own_cpu_ns() - before)

    @timelog.phase(timelog.QUIET_WAIT)
    def settle(self, tb: Testbed, why: str) -> Settled:
        """Probe the host; while it is busy, pause and probe again, until it is quiet or
        the limit is spent. ``why``: what was spoiled, for the progress line."""
        pause = FIRST_PAUSE_S
        first = True
        while True:
            found = self._probe(tb)
            self.last = found
            self.probes.append({"after_s": round(self.waited_s, 1), "why": why, "probe": found})
            if is_quiet(found):
                return Settled.QUIET if first else Settled.AFTER_WAIT
            first = False
            left = self.limit_s - self.waited_s
            if left <= 0:
                return Settled.BUSY
            if self.say:
                self.say(
                    f"waiting for a quiet host: {describe(found)}, {self.waited_s:.0f} s so far"
                )
            step = min(pause, left)
            time.sleep(step)
            self.waited_s += step + PROBE_S
            pause = min(2 * pause, MAX_PAUSE_S)

    @timelog.phase(timelog.QUIET_WAIT)
    def pause(self, why: str) -> bool:
        """A pause of FIRST_PAUSE_S before measuring again something the host spoiled
        though it probes quiet now (a burst of steal that has passed); False, without
        pausing, once the limit is spent."""
        step = min(FIRST_PAUSE_S, self.limit_s - self.waited_s)
        if step <= 0:
            return False
        if self.say:
            self.say(f"{why}; measuring again in {step:.0f} s")
        time.sleep(step)
        self.waited_s += step
        return True

    def exhausted(self, why: str) -> str:
        """The failure's message once the limit is spent."""
        return (
            f"{why}; waited {self.waited_s:.0f} s for a quiet host (limit "
            f"{self.limit_s / 60:g} min) and it stayed busy: {describe(self.last)}"
        )

    def record(self) -> dict[str, Any]:
        """What the attempt stores of its waiting."""
        return {"waited_s": round(self.waited_s, 1), "limit_s": self.limit_s, "probes": self.probes}
