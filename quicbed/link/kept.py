"""A link kept up between commands: shaped and proven by ``quicbed link up``, used by every
later command on the testbed whose cells need that link, until ``quicbed link down``
(or ``quicbed testbed down``).

Why: a receipt takes 10-40 s. A researcher who iterates on cells of one condition (a
cell, its rerun from a package, a cell of another page, a small sweep) paid one per
command although the link had not changed. A kept link's receipt serves every command
for MAX_RECEIPT_AGE_S, as a sweep's serves its cells, under the same proof
(quicbed.link.proof): the record names the generation its receipt measured; a command
reuses the receipt only while the bridge's shaping still reads back as that generation,
and each of its cells opens and closes with a spot check. A kept link whose shaping
changed (an emulator restarted, a testbed torn down after a killed command) is kept no
more: its record is removed and the command shapes a link of its own, as without one.
A command that needs another link is refused by name, before anything is touched.

The record lives on the controller beside the testbed's claim file
(quicbed.testbed.owner; the testbed's ``kept_link_path``): for the local testbed in
/run, gone with a reboot as the namespaces are; ``Testbed.teardown`` removes it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from quicbed.errors import QuicbedError
from quicbed.link.receipt import Receipt
from quicbed.model.link import LinkCondition
from quicbed.testbed.lifecycle import Testbed

KEPT_FORMAT = 1


class KeptLink(BaseModel):
    """What a command needs to use the kept link as if it had shaped it itself."""

    format: int = KEPT_FORMAT
    condition: dict[str, Any]
    #: the shaper that runs (``auto`` resolved)
    shaper: str
    cc: str
    offloads: dict[str, str] = {}
    emulator_priority: str
    #: the hosts' tuning as quicbed.link.tuning set it
    tuning: dict[str, Any]
    #: the interfaces' offloads before the link set its own, put back by ``link down``
    offloads_before: dict[str, dict[str, str]] = {}
    receipt: Receipt
    #: when the receipt was taken (Unix time: commands are other processes)
    measured_unix: float
    #: the command that took the receipt: pid, command line, when
    by: dict[str, Any] = {}
    #: the last passed closing check on the link (quicbed.link.proof.SpotCheck), and when
    #: (Unix time): the next cell's opening check while it is recent
    closing: dict[str, Any] | None = None
    closing_unix: float | None = None

    @property
    def generation(self) -> str:
        return self.receipt.generation or ""

    def age_s(self) -> float:
        return time.time() - self.measured_unix

    def label(self) -> str:
        """The kept link in a phrase: its condition and shaper."""
        return f"{self.receipt.label} ({self.shaper} shaper, {self.cc})"

    def matches(
        self,
        cond: LinkCondition,
        shaper: str,
        cc: str,
        offloads: Mapping[str, str],
        emulator_priority: str,
    ) -> bool:
        """Whether a cell of this condition, shaper, TCP CC, offloads and emulator
        priority can run on the kept link (what ``CellConfig.link_key`` compares)."""
        return (
            self.condition == cond.model_dump(mode="json")
            and self.shaper == shaper
            and self.cc == cc
            and self.offloads == dict(offloads)
            and self.emulator_priority == emulator_priority
        )


def read(tb: Testbed) -> KeptLink | None:
    """The testbed's kept link, or None. A record that cannot be read is an error that
    names it: guessing would measure on a link nobody proved."""
    path = tb.kept_link_path()
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    try:
        rec = KeptLink.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise QuicbedError(
            f"{path}: not a kept link's record ({str(exc).splitlines()[0]}); "
            f"remove it with: quicbed link down{where(tb)}"
        ) from None
    if rec.format != KEPT_FORMAT:
        raise QuicbedError(
            f"{path}: a kept link's record of format {rec.format}, this quicbed reads "
            f"{KEPT_FORMAT}; take it down with: quicbed link down{where(tb)}"
        )
    return rec


def write(tb: Testbed, rec: KeptLink) -> None:
    """Write the record whole or not at all (a reader never sees half of one)."""
    path = tb.kept_link_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(rec.model_dump(mode="json"), indent=1))
    os.replace(tmp, path)


def remove(tb: Testbed) -> bool:
    """The record gone; whether there was one."""
    try:
        tb.kept_link_path().unlink()
        return True
    except FileNotFoundError:
        return False


def made_by() -> dict[str, Any]:
    """This command, for the record: which process proved the kept link, and when."""
    return {
        "pid": os.getpid(),
        "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)),
        "at": datetime.now(UTC).isoformat(),
    }


def check_cells(tb: Testbed, cells: Iterable[Any]) -> None:
    """Refuse, before anything starts, cells (CellConfig) that cannot run on the link
    ``tb`` keeps: another condition, shaper, TCP CC or offloads. Nothing where the
    testbed keeps no link. (The emulator's priority is compared when the link opens.)"""
    from quicbed.shapers import get_shaper

    rec = read(tb)
    if rec is None:
        return
    for cfg in cells:
        shaper = get_shaper(cfg.shaper, tb, cfg.condition).name
        cc = cfg.tcp_cc()
        if not rec.matches(cfg.condition, shaper, cc, cfg.offloads, rec.emulator_priority):
            raise refuse_other(tb, rec, cfg.condition, shaper, cc)


def refuse_other(
    tb: Testbed, rec: KeptLink, cond: LinkCondition, shaper: str, cc: str
) -> QuicbedError:
    """The error for a command that needs another link (``cond`` on ``shaper`` with
    ``cc``) than the kept one."""
    return QuicbedError(
        f"testbed {tb.describe_short()} keeps a link of {rec.label()} (quicbed link up); "
        f"this needs {cond.label()} ({shaper} shaper, {cc}): take the kept link down "
        f"first with: quicbed link down{where(tb)}"
    )


def status(tb: Testbed) -> dict[str, Any] | None:
    """The link kept on ``tb``, for ``quicbed testbed status``: its condition, receipt,
    age and whether the shaping still reads back as the generation the receipt measured
    (else the next command drops it); None where it keeps none."""
    from quicbed.shapers import get_shaper

    rec = read(tb)
    if rec is None:
        return None
    now = get_shaper(rec.shaper, tb, emulator_priority=rec.emulator_priority).generation(tb)
    return {
        "link": rec.label(),
        "receipt_created": rec.receipt.created,
        "age_s": round(rec.age_s()),
        "generation": rec.generation,
        "holds": now == rec.generation,
        "by": rec.by,
    }


def where(tb: Testbed) -> str:
    """The testbed options that name ``tb`` on a command line."""
    desc = tb.describe()
    if desc.get("kind") == "local":
        return f" --prefix {desc.get('prefix')}"
    return f" --testbed {desc.get('kind')} --hosts {desc.get('source', '...')}"
