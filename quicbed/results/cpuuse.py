"""CPU per role as stored with every load and flow.

A load (RunRow.detail["cpu"]), a bulk flow (FlowResult.cpu) and a compete repetition
(CompeteRun.cpu, per arm) each keep a :class:`CpuUse`: the CPU time the arm's server,
the arm's browser or bulk client and the link emulator spent over it, each read from
its own control group (quicbed.roles.cpuaccounting), user and system apart, in milliseconds.
A role without a figure says why (a kernel shaper has no process on the bridge; a
host without accounting). Summaries are computed from the records when read, never
stored beside them (quicbed.analysis.cpusummary).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: the roles a CpuUse has figures for, in the order tables show them

#: what each role's figure is the CPU of
ROLE_MEANS = {
    "server": "the arm's server (all its processes)",
    "client": "the arm's browser or bulk client (all its processes)",
    "bridge": "the link emulator",
}


class CpuTime(BaseModel):
    """CPU time of one role's group over one load or flow.

    ``total_ms`` is the group's run time (exact); ``user_ms`` and ``system_ms`` its
    split as the kernel samples it at the scheduler's tick (quicbed.roles.cgroups):
    over a short load they need not add up to the total, over many they estimate it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_ms: float
    user_ms: float
    system_ms: float


class CpuUse(BaseModel):
    """CPU time per role over one load, one flow, or one arm's flows of a repetition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the wall-clock time between the two readings
    wall_ms: float
    #: by role (:data:`ROLES`)
    roles: dict[str, CpuTime] = Field(default_factory=dict)
    #: by role: why it has no figure
    missing: dict[str, str] = Field(default_factory=dict)
    #: by role: the group read (``server-h3``), so a figure names its processes
    groups: dict[str, str] = Field(default_factory=dict)


def load_cpu(detail: dict[str, Any]) -> CpuUse | None:
    """A load's CpuUse from its RunRow.detail; None for loads stored before it existed."""
    raw = detail.get("cpu")
    return None if raw is None else CpuUse.model_validate(raw)
