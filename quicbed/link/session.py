"""A shaped link for the duration of a ``with`` block, torn down on any exit.

Used by ``quicbed link check`` and by the cell runner: bring the testbed up if it
is not (and only then take it down again), apply the condition with the chosen
shaper, tune the hosts, and on exit, error or Ctrl-C remove the shaping.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from quicbed.link.model import LinkCondition
from quicbed.link.shapers import Shaper, get_shaper
from quicbed.link.tuning import tune_hosts
from quicbed.testbed.base import Testbed
from quicbed.testbed.owner import shielded


@dataclass
class ShapedLink:
    testbed: Testbed
    condition: LinkCondition
    shaper: Shaper
    tuning: dict[str, Any]
    cc: str = "cubic"

    def reapply(self) -> None:
        """Shape and tune afresh (a new emulator: a new generation), e.g. for a retry."""
        self.shaper.apply(self.testbed, self.condition)
        self.tuning = tune_hosts(self.testbed, self.condition, cc=self.cc)


@contextmanager
def shaped_link(
    tb: Testbed, cond: LinkCondition, shaper_name: str = "auto", cc: str = "cubic"
) -> Iterator[ShapedLink]:
    """Everything is validated before anything is touched; everything made is undone.

    The testbed is claimed for the whole block (re-entrant: the caller may hold it);
    the clean-up cannot be interrupted by a second Ctrl-C.
    """
    shaper = get_shaper(shaper_name, tb, cond)
    shaper.check(cond)  # before anything is made
    with tb.claim("quicbed link"):
        created = tb.up()
        try:
            shaper.apply(tb, cond)
            tuning = tune_hosts(tb, cond, cc=cc)
            yield ShapedLink(tb, cond, shaper, tuning, cc)
        finally:
            with shielded():
                shaper.clear(tb)
                if created:
                    tb.down()
