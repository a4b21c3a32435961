"""Several testbeds working off one queue of cell groups (``quicbed run --hosts a --hosts b``).

Each testbed runs one group at a time in its own thread (a group: the cells of one
link condition, so one receipt serves them). A testbed that fails - its bring-up
fails, a command on it raises, a health check after a failed cell finds it gone,
or its receipts fail on cells in a row - is taken out of rotation with the reason,
and the cells it had not finished go back to the front of the queue for the others.
The work stops, with every testbed's reason, only when no testbed is left.

Only the main thread sees Ctrl-C: it stops handing out work and re-raises, and the
caller's teardown of each testbed ends the cells still running on them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from quicbed.errors import QuicbedError
from quicbed.testbed.base import Testbed

T = TypeVar("T")


class TestbedLost(QuicbedError):
    """A testbed can no longer be trusted to measure; its unfinished cells go elsewhere."""


#: (testbed, group, finished) -> None: runs the group's items on the testbed, calling
#: ``finished(item)`` for each item that needs no other testbed
GroupRunner = Callable[[Testbed, list[T], Callable[[T], None]], None]


@dataclass
class PoolOutcome(Generic[T]):
    #: testbed description -> why it was taken out of rotation
    lost: dict[str, str] = field(default_factory=dict)
    #: testbed description -> groups it ran (whole or in part)
    groups_run: dict[str, int] = field(default_factory=dict)


def run_pool(
    testbeds: list[Testbed],
    groups: list[list[T]],
    run_group: GroupRunner[T],
    *,
    on_lost: Callable[[Testbed, str], None] | None = None,
) -> PoolOutcome[T]:
    """Run every group on some testbed; raises QuicbedError naming each testbed's
    reason if testbeds run out before the work does."""
    queue: deque[list[T]] = deque(g for g in groups if g)
    lock = threading.Lock()
    stop = threading.Event()
    outcome: PoolOutcome[T] = PoolOutcome()

    def take() -> list[T] | None:
        with lock:
            return queue.popleft() if queue and not stop.is_set() else None

    def worker(tb: Testbed) -> None:
        name = tb.describe_short()
        group: list[T] = []
        done: list[T] = []
        try:
            tb.up()
            while (g := take()) is not None:
                group, done = g, []
                with lock:
                    outcome.groups_run[name] = outcome.groups_run.get(name, 0) + 1
                run_group(tb, group, done.append)
                group = []
        except Exception as exc:  # any failure takes this testbed out
            reason = str(exc) or type(exc).__name__
            rest = [x for x in group if x not in done]
            tb.lost = reason
            with lock:
                if rest:
                    queue.appendleft(rest)
                outcome.lost[name] = reason
            if on_lost:
                on_lost(tb, reason)

    threads = [
        threading.Thread(target=worker, args=(tb,), daemon=True, name=tb.describe_short())
        for tb in testbeds
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException:
        stop.set()
        raise
    if queue:
        left = sum(len(g) for g in queue)
        why = "; ".join(f"{k}: {v}" for k, v in outcome.lost.items())
        raise QuicbedError(f"every testbed was taken out with {left} cell(s) left to run ({why})")
    return outcome
