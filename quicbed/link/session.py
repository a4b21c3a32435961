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


@dataclass
class ShapedLink:
    testbed: Testbed
    condition: LinkCondition
    shaper: Shaper
    tuning: dict[str, Any]


@contextmanager
def shaped_link(
    tb: Testbed, cond: LinkCondition, shaper_name: str = "auto", cc: str = "cubic"
) -> Iterator[ShapedLink]:
    """Everything is validated before anything is touched; everything made is undone."""
    shaper = get_shaper(shaper_name, tb)
    shaper.describe(cond)  # a shaper rejects options it cannot apply before anything is made
    created = tb.up()
    try:
        shaper.apply(tb, cond)
        tuning = tune_hosts(tb, cond, cc=cc)
        yield ShapedLink(tb, cond, shaper, tuning)
    finally:
        shaper.clear(tb)
        if created:
            tb.down()
