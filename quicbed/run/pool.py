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
    queue: deque[list[T]] = deque(g for g in groups if g)
    #: guards queue, held and outcome; notified when a group comes back, when the last
    #: group held is given up, and on stop
    cond = threading.Condition()
    held = 0  # groups that testbeds hold now (taken, neither finished nor given back)
    stop = threading.Event()
    outcome: PoolOutcome[T] = PoolOutcome()

    def take(name: str, *, finished: bool) -> list[T] | None:
        """The next group for testbed ``name``, or None when it is to leave (on stop, or
        with the queue empty and no group held by anyone, so none can come back).
        ``finished``: it has run the group it held, given up here in the same step as
        it asks for the next, so no other testbed sees the queue empty and nothing held
        in between."""
        nonlocal held
        with cond:
            if finished:
                held -= 1
                if not held:
                    cond.notify_all()  # waiting testbeds may leave
            while not stop.is_set():
                if queue:
                    held += 1
                    outcome.groups_run[name] = outcome.groups_run.get(name, 0) + 1
                    return queue.popleft()
                if not held:
                    return None
                cond.wait()
            return None

    def worker(tb: Testbed) -> None:
        nonlocal held
        name = tb.describe_short()
        group: list[T] | None = None  # the group this testbed holds, while it holds one
        done: list[T] = []
        reason: str | None = None
        try:
            tb.up()
            while (group := take(name, finished=group is not None)) is not None:
                done = []
                run_group(tb, group, done.append)
        except Exception as exc:  # any failure takes this testbed out
            reason = str(exc) or type(exc).__name__
            tb.lost = reason
        finally:
            # also on an exception that is not an Exception, so no testbed waits for ever
            # on a group nobody holds any more
            with cond:
                if group is not None:
                    held -= 1
                    rest = [x for x in group if x not in done]
                    if rest:
                        queue.appendleft(rest)
                if reason is not None:
                    outcome.lost[name] = reason
                cond.notify_all()
        if reason is not None and on_lost:
            on_lost(tb, reason)

    threads = [
        threading.Thread(target=worker, args=(tb,), daemon=True, name=tb.describe_short())
        for tb in testbeds
    ]
    try:
        for t in threads:  # in here: a Ctrl-C while the last ones start stops the first
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException:
        with cond:  # under the lock: a testbed between its check of stop and its wait
            stop.set()  # would otherwise miss the wake-up
            cond.notify_all()
        raise
    if queue:
        left = sum(len(g) for g in queue)
        why = "; ".join(f"{k}: {v}" for k, v in outcome.lost.items())
        raise QuicbedError(f"every testbed was taken out with {left} cell(s) left to run ({why})")
    return outcome
