"""Several testbeds working off one queue of cell groups (``quicbed run --hosts a --hosts b``).

Each testbed runs one group at a time in its own thread (a group: the cells of one
link condition, so one receipt serves them). A testbed that fails - its bring-up
fails, a command on it raises, a health check after a failed cell finds it gone,
or its receipts fail on cells in a row - is taken out of rotation with the reason,
and the cells it had not finished go back to the front of the queue for the others.
So a testbed that finds the queue empty leaves only once no other testbed holds a
group: until then it waits (without polling), since the group another one holds may
come back. The work stops, with every testbed's reason, only when no testbed is left.

Only the main thread sees Ctrl-C: it stops handing out work, wakes the testbeds that
wait for some, and re-raises; the caller's teardown of each testbed ends the cells
still running on them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from quicbed.errors import QuicbedError
from quicbed.testbed.lifecycle import Testbed

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
    work = _Pool(groups, run_group, on_lost)
    threads = [
        threading.Thread(target=work.worker, args=(tb,), daemon=True, name=tb.describe_short())
        for tb in testbeds
    ]
    try:
        for t in threads:  # in here: a Ctrl-C while the last ones start stops the first
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException:
        work.halt()
        raise
    if work.queue:
        left = sum(len(g) for g in work.queue)
        why = "; ".join(f"{k}: {v}" for k, v in work.outcome.lost.items())
        raise QuicbedError(f"every testbed was taken out with {left} cell(s) left to run ({why})")
    return work.outcome


class _Pool(Generic[T]):
    """The groups of one run_pool call and who holds them, shared by its testbeds'
    threads: one object, so what the lock guards is in one place."""

    def __init__(
        self,
        groups: list[list[T]],
        run_group: GroupRunner[T],
        on_lost: Callable[[Testbed, str], None] | None,
    ) -> None:
        self.queue: deque[list[T]] = deque(g for g in groups if g)
        #: guards queue, held and outcome; notified when a group comes back, when the last
        #: group held is given up, and on stop
        self.cond = threading.Condition()
        self.held = 0  # groups that testbeds hold now (taken, neither finished nor given back)
        self.stop = threading.Event()
        self.outcome: PoolOutcome[T] = PoolOutcome()
        self.run_group, self.on_lost = run_group, on_lost

    def take(self, name: str, *, finished: bool) -> list[T] | None:
        """The next group for testbed ``name``, or None when it is to leave (on stop, or
        with the queue empty and no group held by anyone, so none can come back).
        ``finished``: it has run the group it held, given up here in the same step as
        it asks for the next, so no other testbed sees the queue empty and nothing held
        in between."""
        with self.cond:
            if finished:
                self.held -= 1
                if not self.held:
                    self.cond.notify_all()  # waiting testbeds may leave
            while not self.stop.is_set():
                if self.queue:
                    self.held += 1
                    self.outcome.groups_run[name] = self.outcome.groups_run.get(name, 0) + 1
                    return self.queue.popleft()
                if not self.held:
                    return None
                self.cond.wait()
            return None

    def worker(self, tb: Testbed) -> None:
        """One testbed's thread: groups until none is left for it, or until it fails."""
        name = tb.describe_short()
        group: list[T] | None = None  # the group this testbed holds, while it holds one
        done: list[T] = []
        reason: str | None = None
        try:
            tb.up()
            while (group := self.take(name, finished=group is not None)) is not None:
                done = []
                self.run_group(tb, group, done.append)
        except Exception as exc:  # any failure takes this testbed out
            reason = str(exc) or type(exc).__name__
            tb.lost = reason
        finally:
            # also on an exception that is not an Exception, so no testbed waits for ever
            # on a group nobody holds any more
            self.leave(name, group, done, reason)
        if reason is not None and self.on_lost:
            self.on_lost(tb, reason)

    def leave(self, name: str, group: list[T] | None, done: list[T], reason: str | None) -> None:
        """Testbed ``name`` leaves: the items of its group not ``done`` back to the front
        of the queue for the others, and why it was taken out (``reason``), if it was."""
        with self.cond:
            if group is not None:
                self.held -= 1
                rest = [x for x in group if x not in done]
                if rest:
                    self.queue.appendleft(rest)
            if reason is not None:
                self.outcome.lost[name] = reason
            self.cond.notify_all()

    def halt(self) -> None:
        """Stop handing out work and wake the testbeds that wait for some (Ctrl-C)."""
        with self.cond:  # under the lock: a testbed between its check of stop and its wait
            self.stop.set()  # would otherwise miss the wake-up
            self.cond.notify_all()
