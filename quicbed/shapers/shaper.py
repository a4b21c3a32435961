"""What every shaper is: the interface the link, the receipt and the runner use.

A shaper applies a :class:`~quicbed.model.link.LinkCondition` (one pipe per direction) to
a testbed's bridge and reads back what it did. It needs a testbed's roles only
(quicbed.roles.interface), not its life. It keeps its state on the bridge (files, a
process, the kernel's qdiscs or pipes), never in Python objects, so ``clear`` in one
process (``quicbed testbed down``, the next ``quicbed link check``) undoes ``apply`` in
another. Each shaper is one module of this package (quicbed.shapers finds it by its
``name``).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.roles.interface import Roles

#: egress port in the bridge namespace for each direction
EGRESS = {"down": "cli", "up": "srv"}
INGRESS = {"down": "srv", "up": "cli"}


class Shaper(ABC):
    """Applies a LinkCondition to a testbed's bridge and reads back what it did."""

    #: the registry's name, the value of ``--shaper`` and a spec's ``shaper:``
    name: str
    #: what it is, in the words of ``--shaper``'s help
    summary: str
    #: where ``auto`` tries it (lowest first; None: only when named). The last one auto
    #: tries is taken without asking whether it emulates the link (it must emulate all)
    auto_rank: int | None = None
    #: its shaping lives in the bridge machine's kernel (qdiscs, pipes, a bridge), so a
    #: testbed whose teardown removes its network namespaces removes it too; False: a
    #: process of ours, stopped on every teardown (quicbed.shapers.clear_all)
    kernel_state: bool = True

    @abstractmethod
    def unavailable(self, tb: Roles) -> str | None:
        """Why this shaper cannot run here, or None if it can."""

    @abstractmethod
    def apply(self, tb: Roles, cond: LinkCondition, *, persistent: bool = False) -> None:
        """Shape the link; replaces whatever condition was in force."""

    @abstractmethod
    def clear(self, tb: Roles) -> dict[str, Any] | None:
        """Remove the shaping (the link stops forwarding); returns final counters if any."""

    def counters(self, tb: Roles) -> dict[str, Any] | None:
        """The emulator's own per-direction counters, if it has any."""
        return None

    def restart(self, tb: Roles) -> dict[str, Any] | None:
        """Start a time-varying link's trace or schedule again (a shaper that cannot
        run one has none to restart) and return the counters, as ``counters`` does."""
        return self.counters(tb)

    def cpu_seconds(self, tb: Roles) -> float | None:
        """CPU time the emulator has used so far, if it is a process of ours."""
        return None

    #: random loss is drawn at the queue's entry (Dummynet's order), not after the rate
    loss_before_queue: bool = True
    #: False: the shaper applies no condition, so a receipt judges only that nothing
    #: shapes (:meth:`shaping`), and reports what the link carried (``none``)
    shapes: bool = True

    def shaping(self, tb: Roles) -> list[str]:
        """What shapes the link now, read back from the bridge (a shaper that does not
        shape must find nothing: the receipt's check ``unshaped``)."""
        return []

    @abstractmethod
    def check(self, cond: LinkCondition) -> None:
        """Refuse a condition this shaper cannot apply (QuicbedError naming the option),
        before anything is made: a cell or sweep is validated whole before it starts."""

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        """What was applied, as data for the receipt and provenance."""
        return {"shaper": self.name}

    @abstractmethod
    def state(self, tb: Roles) -> str:
        """The shaping in force now, as read back from the bridge (not from memory).

        Its digest is the link's *generation*: a receipt records it, every load is
        checked against it, so a link replaced or reconfigured behind a running cell
        (by another process, a crash and restart, anything) is caught.
        """

    def generation(self, tb: Roles) -> str:
        return hashlib.sha256(self.state(tb).encode()).hexdigest()[:16]


def no_ecn_marking(shaper: str, cond: LinkCondition) -> None:
    """Refuse ECN marking by name on a shaper that only drops: tbf and netem's queue mark
    nothing, and quicbed does not configure Dummynet's RED/ECN (a different AQM)."""
    if cond.ecn_threshold is not None:
        raise QuicbedError(
            f"ecn_threshold {cond.ecn_threshold!r}: the {shaper} shaper does not mark ECN "
            "(only the userspace emulator does: --shaper userspace)"
        )


def one_distance(shaper: str, cond: LinkCondition) -> None:
    """Refuse per-origin RTTs by name on a shaper that delays every address alike: tbf,
    netem and Dummynet's pipes as quicbed sets them have one delay per direction."""
    if cond.origin_rtt is not None:
        raise QuicbedError(
            f"origin_rtt {cond.origin_rtt!r}: the {shaper} shaper delays every address "
            "alike (only the userspace emulator adds an RTT per origin: --shaper userspace)"
        )


def constant_capacity(shaper: str, cond: LinkCondition) -> None:
    """Refuse a time-varying link by name on a shaper whose rate is set once: tbf,
    netem and Dummynet's pipes take one rate and one delay (docs/varying-links.md)."""
    kind = cond.varying()
    if kind is not None:
        raise QuicbedError(
            f"{kind} {cond.trace or cond.schedule!r}: the {shaper} shaper holds one rate "
            "(only the userspace emulator follows a trace or schedule: --shaper userspace)"
        )
