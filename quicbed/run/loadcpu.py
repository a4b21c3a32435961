"""CPU per role around one load or flow: two readings of the arm's groups, their difference.

The groups are the testbed's (quicbed.roles.cpuaccounting): the runner starts each arm's
server and browser or bulk client inside :func:`joining`, the userspace shaper its
emulator in the bridge's group; a load's or flow's figure is what the groups' counters
grew by between :meth:`CpuMeter.begin` and :meth:`CpuMeter.end`, stored as a
quicbed.results.cpuuse.CpuUse with the load or flow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from quicbed.results.cpuuse import CpuTime, CpuUse
from quicbed.roles.cpuaccounting import EMULATOR, Reading, group_name
from quicbed.testbed.lifecycle import Testbed


def groups_of(arm: str) -> dict[str, str]:
    """The group each role's figure of ``arm`` is read from."""
    return {
        "server": group_name("server", arm),
        "client": group_name("client", arm),
        "bridge": EMULATOR,
    }


@contextmanager
def joining(tb: Testbed, role: str, arm: str) -> Iterator[None]:
    """What ``tb`` spawns on ``role`` in this block joins ``arm``'s group there."""
    with tb.cpu.joining(role, group_name(role, arm)):
        yield


@dataclass(frozen=True)
class Mark:
    """The readings a load or flow starts from."""

    t: float
    readings: dict[tuple[str, str], Reading | str]


class CpuMeter:
    """Readings of some arms' groups, and the CPU each role spent between two of them."""

    def __init__(self, tb: Testbed, arms: Sequence[str]) -> None:
        self.tb = tb
        self.arms = list(arms)
        wanted = {(role, g) for a in self.arms for role, g in groups_of(a).items()}
        self._wanted = sorted(wanted)
        for role, g in self._wanted:
            if g != EMULATOR:  # made by the emulator's start: none is no figure, not zero
                tb.cpu.make(role, g)

    def begin(self) -> Mark:
        readings = self.tb.cpu.read(self._wanted)
        return Mark(time.monotonic(), readings)

    def end(self, mark: Mark) -> dict[str, CpuUse]:
        """Per arm, what its roles spent since ``mark``."""
        now = self.tb.cpu.read(self._wanted)
        wall_ms = (time.monotonic() - mark.t) * 1000
        out = {}
        for arm in self.arms:
            roles: dict[str, CpuTime] = {}
            missing: dict[str, str] = {}
            groups = groups_of(arm)
            for role, g in groups.items():
                a, b = mark.readings.get((role, g)), now.get((role, g))
                if isinstance(a, Reading) and isinstance(b, Reading):
                    roles[role] = CpuTime(
                        total_ms=(b.total_ns - a.total_ns) / 1e6,
                        user_ms=(b.user_ns - a.user_ns) / 1e6,
                        system_ms=(b.system_ns - a.system_ns) / 1e6,
                    )
                else:
                    missing[role] = str(b if isinstance(b, str) else a)
            out[arm] = CpuUse(wall_ms=wall_ms, roles=roles, missing=missing, groups=groups)
        return out


def own_cpu_ms(tb: Testbed, uses: Sequence[CpuUse]) -> float | None:
    """The CPU a load's or flows' own roles used (servers, browser or clients, emulator),
    where the roles share the host (Testbed.one_machine), so the rest of its busy time is
    other work (quicbed.link.loadproof); None where they have hosts of their own."""
    if not tb.one_machine:
        return None
    return float(sum(t.total_ms for u in uses for t in u.roles.values()))
