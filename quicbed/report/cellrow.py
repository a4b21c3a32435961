"""A row of the report's cell table: one cell (its latest attempt) and one pair of arms.

One definition for what ``table.csv`` holds (``COLUMNS``, in that order), what the HTML
page shows beside it (the cell's loads, receipt, arms, testbed, explain link) and what
the heatmaps read. A cell of several pairs has several rows; a cell that two scenarios
plan has its rows in both (``first`` marks the one row that shows the cell's receipt,
testbed and explain page; ``first_in_scenario`` the first of each scenario).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quicbed.results.rows import RunRow
from quicbed.settings.certificate import DEFAULT as DEFAULT_CHAIN

if TYPE_CHECKING:  # the report reads stored arms without importing the stacks' runners
    from quicbed.servers.webserver import Arm

#: the columns of table.csv, in order
COLUMNS = [
    "scenario",
    "cell_id",
    "attempt",
    "attempts",
    "status",
    "page",
    "rate_mbit",
    "rtt_ms",
    "loss_pct",
    "loss_down_pct",
    "loss_up_pct",
    "jitter_ms",
    "jitter_kind",
    "queue",
    "background",
    "certificate",
    "origin_rtt",
    "server_time",
    "link",
    "mode",
    "runs",
    "cc",
    "pair",
    "ref",
    "cand",
    "ref_stack",
    "cand_stack",
    "ref_cc",
    "cand_cc",
    "ref_browser",
    "cand_browser",
    "ref_groups",
    "cand_groups",
    "n_ref",
    "mean_ref",
    "sd_ref",
    "median_ref",
    "n_cand",
    "mean_cand",
    "sd_cand",
    "median_cand",
    "pct_diff",
    "pltc",
    "welch_p",
    "mannwhitney_p",
    "p_used",
    "p_adjusted",
    "significant",
    "testable",
    "boot_diff_low",
    "boot_diff_high",
    "receipt_passed",
    "invalid_ref",
    "invalid_cand",
    "problem",
    "queue_warning",
    "bg_share_ref",
    "bg_share_cand",
]


@dataclass(kw_only=True)
class Compared:
    """One comparison of two samples as a heatmap cell reads it: the statistics of
    quicbed.analysis.stats.compare (``comparison_columns``), then the p-value adjusted
    per heatmap and the verdict (``correct``)."""

    status: str = "done"
    n_ref: int | None = None
    mean_ref: float | None = None
    sd_ref: float | None = None
    median_ref: float | None = None
    n_cand: int | None = None
    mean_cand: float | None = None
    sd_cand: float | None = None
    median_cand: float | None = None
    pct_diff: float | None = None
    pltc: float | None = None
    welch_p: float | None = None
    mannwhitney_p: float | None = None
    p_used: float | None = None
    testable: bool | None = None
    significant: bool | None = None
    boot_diff_low: float | None = None
    boot_diff_high: float | None = None
    p_adjusted: float | None = None


@dataclass(kw_only=True)
class ModeCell(Compared):
    """A cell of a 0-RTT vs 1-RTT heatmap: (scenario, rate, RTT, loss, jitter, page)."""

    key: tuple[Any, ...]


@dataclass(kw_only=True)
class CellRow(Compared):
    """One row of the cell table; see the module's docstring."""

    # the cell and its condition
    scenario: str
    cell_id: str
    attempt: int
    attempts: int
    page: str
    rate_mbit: float | None
    rtt_ms: float
    loss_pct: float
    loss_down_pct: float | None = None
    loss_up_pct: float | None = None
    jitter_ms: float
    jitter_kind: str
    queue: str
    mode: str
    runs: int
    cc: str
    #: the background flows beside every load (quicbed.spec.background: ``none``, or
    #: ``bulk:tcp:bbr,...``), and the downloads' share of the link over each side's
    #: valid loads (mean over the loads of their summed share; None: no download; an
    #: upload's share, of the uplink, is in the loads' detail)
    background: str = "none"
    #: the chain every arm's server sent (quicbed.settings.certificate: KEY/N)
    certificate: str = DEFAULT_CHAIN
    #: a replayed page's origins (the cell's settings: ``recorded``, ms for every
    #: origin, "" for the link's RTT) and server time (``recorded``, "" for none)
    origin_rtt: str = ""
    server_time: str = ""
    #: a time-varying link (quicbed.model.capacity): ``trace NAME`` or ``schedule TEXT``,
    #: in place of a rate; "" for a constant one
    link: str = ""
    bg_share_ref: float | None = None
    bg_share_cand: float | None = None
    problem: str = ""
    queue_warning: str | None = None
    receipt_passed: bool | None = None
    # the pair compared ("" for a cell of one arm)
    pair: str = ""
    ref: str | None = None
    cand: str | None = None
    ref_stack: str | None = None
    cand_stack: str | None = None
    ref_cc: str | None = None
    cand_cc: str | None = None
    #: the browser each side loaded in, with its build (``Firefox 153.8.0``)
    ref_browser: str | None = None
    cand_browser: str | None = None
    #: the key-exchange groups each side's measured loads ran, as their ServerHellos
    #: showed (quicbed.results.handshakes.arm_groups; "" where none was read)
    ref_groups: str = ""
    cand_groups: str = ""
    invalid_ref: int | None = None
    invalid_cand: int | None = None
    # what the page shows beside the table
    loads: list[RunRow] = field(default_factory=list)
    receipt: dict[str, Any] | None = None
    invalid: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    arms: dict[str, Arm] = field(default_factory=dict)
    first: bool = True
    first_in_scenario: bool = True
    testbed: dict[str, Any] = field(default_factory=dict)
    testbed_colour: str = ""
    condition: str = ""
    software: str = ""
    invalid_reasons: list[str] = field(default_factory=list)
    #: per arm whose stack keeps one, what its loads ran under (WebServer.record_line)
    records: list[str] = field(default_factory=list)
    #: what the link and the host did during the loads (quicbed.results.linkload)
    link_line: str | None = None
    #: each measured load: arm, rep, PLT, valid, replacement, and its proof's figures
    #: (quicbed.results.linkload.figures), for the report's per-load table
    load_proofs: list[dict[str, Any]] = field(default_factory=list)
    rerun: str = ""
    explain: str | None = None
    explain_problem: str | None = None

    def columns(self) -> dict[str, Any]:
        """The row as table.csv holds it."""
        return {k: getattr(self, k) for k in COLUMNS}
