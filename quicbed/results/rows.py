"""The rows of a results store as types: a load (``RunRow``) and an attempt (``AttemptRow``).

One definition each, shared by the code that writes them (quicbed.run.cell), the store
that keeps them (quicbed.results.store) and every reader (report, export, explain,
package, verify): a misspelt key or a flag stored as the wrong type fails where it is
written, not in a figure months later. Their fields are the store's columns, with the
JSON columns decoded and SQLite's 0/1 read back as booleans.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RunRow(BaseModel):
    """One load of one arm in one attempt: valid or not, warm-up or measured, with why."""

    model_config = ConfigDict(extra="forbid")

    cell_id: str
    attempt: int
    arm: str
    rep: int = Field(description="0-based; warm-ups first (negative: a resumed attempt's)")
    seq: int = Field(description="order of execution within the attempt")
    warmup: bool
    valid: bool
    reason: str = Field(default="", description='why invalid ("" if valid)')
    plt_ms: float | None = Field(default=None, description="HAR onLoad minus DNS")
    onload_ms: float | None = None
    dns_ms: float | None = None
    nav_load_ms: float | None = Field(default=None, description="Navigation Timing loadEventEnd")
    ttfb_ms: float | None = Field(
        default=None, description="Navigation Timing responseStart of the main document"
    )
    fcp_ms: float | None = Field(
        default=None,
        description="first contentful paint after the navigation's time origin (None: "
        "nothing contentful painted, or not read: client/paint.js)",
    )
    lcp_ms: float | None = Field(
        default=None,
        description="largest contentful paint after the navigation's time origin, read "
        "after onload (None: nothing contentful painted, no LCP in the browser, or a "
        "store older than schema 5)",
    )
    speed_index_ms: float | None = Field(
        default=None,
        description="Speed Index from the frames the browser showed (None: the cell "
        "captured no frames, the frames could not be scored, or a store older than "
        "schema 6: quicbed.client.visual)",
    )
    visual_complete_ms: float | None = Field(
        default=None,
        description="when the page's frames reached 99 % visual progress and stayed "
        "(None as speed_index_ms)",
    )
    objects: int | None = None
    bytes: int | None = None
    protocols: list[str] | None = Field(
        default=None, description="protocols seen on the test origin"
    )
    used_0rtt: bool | None = Field(
        default=None, description="from the server's log (None: not applicable)"
    )
    tls_resumed: bool | None = Field(
        default=None, description="from the server's log (None: unknown)"
    )
    har_path: str | None = Field(default=None, description="relative to the results folder")
    started: str = ""
    detail: dict[str, Any] = Field(default_factory=dict, description="per-entry timings etc.")

    @field_validator("reason", mode="before")
    @classmethod
    def _no_reason(cls, v: str | None) -> str:
        return v or ""  # a NULL column (the schema allows it) reads as no reason

    @property
    def run_id(self) -> str:
        """Deterministic: a load can never be stored twice."""
        return f"{self.cell_id}:{self.attempt}:{self.arm}:{self.rep}"


class AttemptRow(BaseModel):
    """One attempt of a cell: when, how it ended, under which receipt and provenance."""

    model_config = ConfigDict(extra="forbid")

    cell_id: str
    attempt: int
    started: str
    finished: str | None = None
    status: str = Field(description="running | done | failed")
    problem: str | None = None
    receipt: dict[str, Any] | None = Field(default=None, description="the latest fidelity receipt")
    provenance: dict[str, Any] | None = Field(
        None, description="versions, kernel, sysctls, git SHA, components"
    )
    reason: str | None = Field(
        None, description="why it failed: quicbed.results.folder.FailureReason's code"
    )
    waited_s: float | None = Field(None, description="seconds it waited for a quiet host")
