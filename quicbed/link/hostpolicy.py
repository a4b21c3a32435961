"""How a run copes with a noisy host: the settings, validated once for CLI and spec.

A sweep spec's ``host:`` section and the options of ``quicbed cell`` and ``quicbed run``
hold the same four settings. None of them is a condition of the cells (their IDs and
the spec's digest leave them out): they decide how the emulator is scheduled, how long
a cell waits for a quiet host, and which loads the link's own counters reject and
replace. Every load stores the tolerance it was judged by.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from quicbed.errors import QuicbedError
from quicbed.link.loadproof import check_late_tolerance
from quicbed.link.quiet import DEFAULT_WAIT_MINUTES, check_wait_minutes
from quicbed.shapers.userspace import DEFAULT_EMULATOR_PRIORITY, check_emulator_priority


class HostPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    #: how the userspace emulator is scheduled (quicbed.shapers.userspace.EMULATOR_PRIORITIES)
    emulator_priority: Literal["rt", "normal"] = DEFAULT_EMULATOR_PRIORITY  # type: ignore[assignment]
    #: the longest a cell waits for a quiet host, in minutes (quicbed.link.quiet; 0: never)
    quiet_wait_minutes: float = Field(default=DEFAULT_WAIT_MINUTES, ge=0)
    #: how late a load's latest frame may leave the emulator (ms; None: from the link,
    #: quicbed.link.loadproof.late_tolerance_ms)
    late_tolerance_ms: float | None = Field(default=None, gt=0)
    #: the most spoiled loads an arm replaces (None: half its runs, at least 1)
    max_replaced: int | None = Field(default=None, ge=0)

    @classmethod
    def from_options(
        cls,
        emulator_priority: str,
        quiet_wait: float,
        late_tolerance: float | None,
        max_replaced: int | None,
    ) -> HostPolicy:
        """From the command line, each bad value refused naming its option."""
        check_emulator_priority(emulator_priority)
        check_wait_minutes(quiet_wait)
        if late_tolerance is not None:
            check_late_tolerance(late_tolerance)
        if max_replaced is not None and max_replaced < 0:
            raise QuicbedError(
                f"--max-replaced {max_replaced}: the most spoiled loads an arm replaces, a "
                "whole number >= 0"
            )
        return cls(
            emulator_priority=emulator_priority,  # type: ignore[arg-type]
            quiet_wait_minutes=quiet_wait,
            late_tolerance_ms=late_tolerance,
            max_replaced=max_replaced,
        )

    def replaced_per_arm(self, runs: int) -> int:
        """The most spoiled loads an arm of a cell of ``runs`` replaces."""
        if self.max_replaced is None:
            return max(1, runs // 2)
        if self.max_replaced > runs:
            raise QuicbedError(
                f"max_replaced {self.max_replaced}: more than the cell's {runs} runs (a cell "
                "would be measured twice over; wait for a quieter host instead: "
                "quiet_wait_minutes)"
            )
        return self.max_replaced
