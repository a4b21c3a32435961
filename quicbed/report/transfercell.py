"""A transfer cell (bulk, compete) as the report shows it: one cell's latest attempt, typed
as quicbed.report.cellrow types a page cell's row, so the report's table, its axis
figures and transfers.json read fields, not keys of a dict."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from quicbed.analysis.transfers import Comparisons
from quicbed.model.link import LinkCondition
from quicbed.results.rows import AttemptRow
from quicbed.results.transfers import ArmBulk, ArmCompete
from quicbed.roles import offloads
from quicbed.spec.cellconfig import flows_text
from quicbed.spec.sweepspec import stored_queue_warning


@dataclass
class TransferCell:
    """One transfer cell's latest attempt: what it asked for (its stored config), how the
    attempt ended, and what the report computed from its record."""

    kind: str
    scenario: str
    cell_id: str
    attempt: int
    status: str
    problem: str
    receipt_passed: bool | None
    condition: LinkCondition
    #: the bulk object (quicbed.spec.bulkobjects: 10MB, 1GB, ...)
    object: str
    duration_s: float | None
    flows: str
    stagger_s: float
    runs: int
    offloads: str
    arms: list[str]
    #: each arm's settings as the cell's config stores them (stack, cc, parameters)
    settings: dict[str, dict[str, Any]]
    #: the cell's CC, for arms that name none
    cc: str | None
    queue_warning: str | None
    #: per arm, its summary (quicbed.analysis.transfers), and per pair its comparisons;
    #: empty for an attempt without a record
    summary: dict[str, ArmBulk] | dict[str, ArmCompete] = field(default_factory=dict)
    comparisons: Comparisons = field(default_factory=dict)
    #: its figures' file names
    figures: list[str] = field(default_factory=list)
    jain_mean: float | None = None
    jain_sd: float | None = None
    #: what the link and the host did during its flows (quicbed.results.linkload)
    link_line: str | None = None

    @classmethod
    def stored(cls, cfg: dict[str, Any], cid: str, att: AttemptRow, scenario: str) -> TransferCell:
        """From the store's cell config and the attempt's row."""
        t = cfg["transfer"]
        flows = [tuple(x) for x in t.get("flows") or []]
        receipt = att.receipt
        return cls(
            kind=cfg["kind"],
            scenario=scenario,
            cell_id=cid,
            attempt=att.attempt,
            status=att.status,
            problem=att.problem or "",
            receipt_passed=None if receipt is None else receipt["passed"],
            condition=LinkCondition.model_validate(cfg["condition"]),
            object=t["size"],
            duration_s=t.get("duration_s"),
            flows=flows_text(tuple(flows)) if flows else "",
            stagger_s=t.get("stagger_s", 0),
            runs=cfg["runs"],
            offloads=offloads.text(cfg.get("offloads") or {}),
            arms=list(cfg["arms"]),
            settings=cfg.get("arm_settings") or {},
            cc=cfg.get("cc"),
            queue_warning=stored_queue_warning(cfg["condition"]),
        )

    # --- the link, as the table's columns give it ---------------------------------------
    @property
    def rate_mbit(self) -> float | None:
        return self.condition.rate_mbit

    @property
    def rtt_ms(self) -> float:
        """The base RTT: a cell given one-way delays has no rtt_ms, their sum is it."""
        return self.condition.rtt()

    @property
    def loss_pct(self) -> float:
        return self.condition.loss_pct

    @property
    def loss_down_pct(self) -> float | None:
        return self.condition.loss_down_pct

    @property
    def queue(self) -> str:
        return self.condition.queue

    def link_key(self) -> str:
        """The condition as one string: cells with equal keys share their link."""
        return json.dumps(self.condition.model_dump(mode="json"), sort_keys=True)

    def arm_settings(self, arm: str) -> dict[str, Any]:
        return self.settings.get(arm) or {}

    def public(self) -> dict[str, Any]:
        """The cell as transfers.json has it: its fields but the typed inputs it was read
        from (the condition, the arms' settings and CC), the link as the table's columns,
        the summaries and comparisons as their models dump them, Jain's index for compete
        cells only."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _INPUTS}
        out |= {k: getattr(self, k) for k in _LINK}
        out["summary"] = {arm: s.model_dump() for arm, s in self.summary.items()}
        out["comparisons"] = {
            pair: {metric: c.model_dump() for metric, c in metrics.items()}
            for pair, metrics in self.comparisons.items()
        }
        if self.kind != "compete":
            del out["jain_mean"], out["jain_sd"]
        return out


#: what TransferCell.public leaves out (the inputs) and adds (the link's columns)
_INPUTS = ("condition", "settings", "cc")
_LINK = ("rate_mbit", "rtt_ms", "loss_pct", "loss_down_pct", "queue")
