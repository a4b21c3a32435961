"""A shaped link for the duration of a ``with`` block, torn down on any exit.

Used by ``quicbed link check`` and by the cell runner: bring the testbed up if it
is not (and only then take it down again), apply the condition with the chosen
shaper, tune the hosts, and on exit, error or Ctrl-C remove the shaping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from quicbed.link.tuning import tune_hosts
from quicbed.model.link import LinkCondition
from quicbed.roles import offloads as nic
from quicbed.shapers import get_shaper
from quicbed.shapers.shaper import Shaper
from quicbed.shapers.userspace import DEFAULT_EMULATOR_PRIORITY
from quicbed.testbed.lifecycle import Testbed
from quicbed.testbed.owner import shielded


@dataclass
class ShapedLink:
    testbed: Testbed
    condition: LinkCondition
    shaper: Shaper
    tuning: dict[str, Any]
    cc: str = "cubic"
    #: the cell's interface offloads (quicbed.roles.offloads), set after the shaping
    offloads: dict[str, str] = field(default_factory=dict)

    def reapply(self) -> None:
        """Shape and tune afresh (a new emulator: a new generation), e.g. for a retry."""
        self.shaper.apply(self.testbed, self.condition)
        nic.apply(self.testbed, self.offloads)
        self.tuning = tune_hosts(self.testbed, self.condition, cc=self.cc, offloads=self.offloads)

    def offload_watch(self) -> nic.Watch:
        """The cell's offloads read back around one load or flow."""
        return nic.Watch(self.testbed, self.offloads)


@contextmanager
def shaped_link(
    tb: Testbed,
    cond: LinkCondition,
    shaper_name: str = "auto",
    cc: str = "cubic",
    offloads_set: Mapping[str, str] | None = None,
    emulator_priority: str = DEFAULT_EMULATOR_PRIORITY,
) -> Iterator[ShapedLink]:
    """Everything is validated before anything is touched; everything made is undone.

    ``offloads_set``: the cell's interface offloads, set on every role's interface
    after the shaping and put back as they were before the shaping is removed.

    The testbed is claimed for the whole block (re-entrant: the caller may hold it);
    the clean-up cannot be interrupted by a second Ctrl-C.
    """
    shaper = get_shaper(shaper_name, tb, cond, emulator_priority)
    shaper.check(cond)  # before anything is made
    setting = dict(offloads_set or {})
    nic.check_shaper(shaper.name, setting)
    with tb.claim("quicbed link"):
        created = tb.up()
        before: dict[str, dict[str, str]] = {}
        try:
            shaper.apply(tb, cond)
            if setting:
                before = nic.apply(tb, setting)
            tuning = tune_hosts(tb, cond, cc=cc, offloads=setting)
            yield ShapedLink(tb, cond, shaper, tuning, cc, setting)
        finally:
            with shielded():
                if before:
                    nic.restore(tb, before)
                shaper.clear(tb)
                if created:
                    tb.down()
