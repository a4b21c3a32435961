"""A shaped link for the duration of a ``with`` block, torn down on any exit.

Used by ``quicbed link check`` and by the cell runner: bring the testbed up if it
is not (and only then take it down again), apply the condition with the chosen
shaper, tune the hosts, and on exit, error or Ctrl-C remove the shaping. On a testbed
that keeps a link (``quicbed link up``, quicbed.link.kept) the block uses that link as
it is, its receipt with it, and leaves it up; ``quicbed link up`` itself makes a link
that outlives the block once its receipt passed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quicbed.link.tuning import tune_hosts
from quicbed.model.link import LinkCondition
from quicbed.roles import offloads as nic
from quicbed.shapers import get_shaper
from quicbed.shapers.shaper import Shaper
from quicbed.shapers.userspace import DEFAULT_EMULATOR_PRIORITY
from quicbed.testbed.lifecycle import Testbed
from quicbed.testbed.owner import shielded

if TYPE_CHECKING:  # the receipt's module loads scipy: not for every command's start
    from quicbed.link import kept
    from quicbed.link.receipt import Receipt


@dataclass
class ShapedLink:
    testbed: Testbed
    condition: LinkCondition
    shaper: Shaper
    tuning: dict[str, Any]
    cc: str = "cubic"
    #: the cell's interface offloads (quicbed.roles.offloads), set after the shaping
    offloads: dict[str, str] = field(default_factory=dict)
    #: the testbed's kept link (quicbed.link.kept): it outlives the block, and each
    #: receipt that proves it is recorded for later commands
    keep: bool = False
    #: the kept link's record as it stands (its receipt may still prove the link); None
    #: until a receipt of a link to keep is recorded, and once the link is shaped afresh
    kept_record: kept.KeptLink | None = None
    #: the emulator's priority (quicbed.shapers.userspace), kept with a kept link's record
    emulator_priority: str = DEFAULT_EMULATOR_PRIORITY
    #: the interfaces' offloads before the link set its own (put back by ``link down``)
    offloads_before: dict[str, dict[str, str]] = field(default_factory=dict)

    def reapply(self) -> None:
        """Shape and tune afresh (a new emulator: a new generation), e.g. for a retry."""
        self.shaper.apply(self.testbed, self.condition, persistent=self.keep)
        nic.apply(self.testbed, self.offloads)
        self.tuning = tune_hosts(self.testbed, self.condition, cc=self.cc, offloads=self.offloads)
        self.kept_record = None  # its receipt measured another generation

    def record_kept(self, receipt: Receipt) -> None:
        """A kept link's new receipt, recorded for the commands after this one."""
        from quicbed.link import kept

        if not self.keep or not receipt.passed:
            return
        self.kept_record = kept.KeptLink(
            condition=self.condition.model_dump(mode="json"),
            shaper=self.shaper.name,
            cc=self.cc,
            offloads=self.offloads,
            emulator_priority=self.emulator_priority,
            tuning=self.tuning,
            offloads_before=self.offloads_before,
            receipt=receipt,
            measured_unix=time.time(),
            by=kept.made_by(),
        )
        kept.write(self.testbed, self.kept_record)

    def record_closing(self, check: dict[str, Any], generation: str) -> None:
        """A kept link's passed closing check, recorded so that the next command's first
        cell may open with it, as a sweep's next cell does (quicbed.link.proof)."""
        from quicbed.link import kept

        rec = self.kept_record
        if not self.keep or rec is None or rec.generation != generation:
            return
        self.kept_record = rec.model_copy(update={"closing": check, "closing_unix": time.time()})
        kept.write(self.testbed, self.kept_record)

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
    keep: bool = False,
) -> Iterator[ShapedLink]:
    """Everything is validated before anything is touched; everything made is undone.

    ``offloads_set``: the cell's interface offloads, set on every role's interface
    after the shaping and put back as they were before the shaping is removed.

    The testbed is claimed for the whole block (re-entrant: the caller may hold it);
    the clean-up cannot be interrupted by a second Ctrl-C.

    A testbed that keeps a link (quicbed.link.kept): the block gets that link, with
    its receipt while the shaping reads back as the generation it measured, and leaves
    it as it is; a condition, shaper, TCP CC, offloads or emulator priority other than
    the kept link's is refused before anything is touched. ``keep`` (``quicbed link
    up``): the link made here is kept once a passed receipt of it is recorded
    (``ShapedLink.record_kept``), and undone like any other if none is.
    """
    shaper = get_shaper(shaper_name, tb, cond, emulator_priority)
    shaper.check(cond)  # before anything is made
    setting = dict(offloads_set or {})
    nic.check_shaper(shaper.name, setting)
    from quicbed.link import kept  # lazy: the receipt's module loads scipy

    with tb.claim("quicbed link"):
        found = kept.read(tb)
        if found is not None:
            if not found.matches(cond, shaper.name, cc, setting, emulator_priority):
                raise kept.refuse_other(tb, found, cond, shaper.name, cc)
            if shaper.generation(tb) == found.generation:
                yield ShapedLink(
                    tb,
                    cond,
                    shaper,
                    found.tuning,
                    cc,
                    setting,
                    keep=True,
                    kept_record=found,
                    emulator_priority=emulator_priority,
                    offloads_before=found.offloads_before,
                )
                return
            kept.remove(tb)
            print(
                f"quicbed: testbed {tb.describe_short()}: the kept link of {found.label()} "
                "changed since its receipt (its shaping reads back as another generation); "
                "kept no more: this command shapes its own",
                file=sys.stderr,
            )
        created = tb.up()
        before: dict[str, dict[str, str]] = {}
        link: ShapedLink | None = None
        try:
            shaper.apply(tb, cond, persistent=keep)
            if setting:
                before = nic.apply(tb, setting)
            tuning = tune_hosts(tb, cond, cc=cc, offloads=setting)
            link = ShapedLink(
                tb,
                cond,
                shaper,
                tuning,
                cc,
                setting,
                keep=keep,
                emulator_priority=emulator_priority,
                offloads_before=before,
            )
            yield link
        finally:
            if link is None or not link.keep or link.kept_record is None:
                with shielded():
                    if before:
                        nic.restore(tb, before)
                    shaper.clear(tb)
                    if created:
                        tb.down()


def take_down(tb: Testbed) -> kept.KeptLink | None:
    """``quicbed link down``: the kept link's shaping removed and its interfaces'
    offloads put back, its record gone (the testbed stays up); the record it had, or
    None where the testbed kept no link."""
    from quicbed.link import kept  # lazy: the receipt's module loads scipy

    with tb.claim("quicbed link down"):
        found = kept.read(tb)
        if found is None:
            return None
        with shielded():
            if found.offloads_before:
                nic.restore(tb, found.offloads_before)
            get_shaper(found.shaper, tb, emulator_priority=found.emulator_priority).clear(tb)
            kept.remove(tb)
        return found
