"""Transfer cells' summaries and comparisons, computed from a stored record's runs.

Never stored beside the record (quicbed.results.transfers): the report, ``quicbed
bulk``/``compete``, the runner's verdict at a cell's end and ``verify`` each compute
them here from the runs alone, so the numbers have one home and a record read again
gives the same numbers.
"""

from __future__ import annotations

import statistics
from typing import Any

from pydantic import Field

from quicbed.analysis.cpusummary import summary as cpu_summary
from quicbed.analysis.stats import Comparison, compare
from quicbed.errors import QuicbedError
from quicbed.results.netcounters import RoleCounters
from quicbed.results.store import Store
from quicbed.results.transfers import ArmBulk, ArmCompete, BulkResult, CompeteResult
from quicbed.spec.arms import own_pairs, pairs
from quicbed.spec.significance import DEFAULT_ALPHA

#: a transfer cell's comparisons: per pair ``reference/candidate``, per metric (bulk:
#: ``completion_s`` and ``goodput_bps``, compete: ``per_flow_bps``)
Comparisons = dict[str, dict[str, Comparison]]


class BulkSummary(BulkResult):
    """A bulk record as read (:func:`bulk_summary`): its summary and its comparisons
    typed. Typed here, not on the record: Comparison lives in quicbed.analysis.stats,
    above the records' folder (and with scipy), and a stored record's comparisons are
    always empty. Serialized as the record with dict comparisons was, field for field."""

    comparisons: Comparisons = Field(default_factory=dict)


class CompeteSummary(CompeteResult):
    """A compete record as read (:func:`compete_summary`); see :class:`BulkSummary`."""

    comparisons: Comparisons = Field(default_factory=dict)


def _mean(v: list[float]) -> float | None:
    return statistics.fmean(v) if v else None


def _sd(v: list[float]) -> float | None:
    return statistics.stdev(v) if len(v) > 1 else None


def counter_totals(items: list[dict[str, RoleCounters]]) -> dict[str, dict[str, int]]:
    """Per role, the flows' UDP receive-buffer errors, UDP receive errors and drops."""
    out: dict[str, dict[str, int]] = {"udp_rcvbuf_errors": {}, "udp_in_errors": {}, "drops": {}}
    for counters in items:
        for role, c in counters.items():
            for key, v in (
                ("udp_rcvbuf_errors", c.udp_rcvbuf_errors),
                ("udp_in_errors", c.udp_in_errors),
                ("drops", c.drops),
            ):
                out[key][role] = out[key].get(role, 0) + v
    return out


def bulk_summary(
    r: BulkResult,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    extra_pairs: list[tuple[str, str]] | None = None,
) -> BulkSummary:
    """``r`` with its per-arm summary and its comparisons, from its runs alone (the
    report and verify call this on a stored record, so the numbers have one home).
    Compared: each arm against the TCP reference, and the spec's ``statistics.pairs``
    among the cell's arms (``quicbed.spec.arms.pairs``, as for page cells)."""
    summary: dict[str, ArmBulk] = {}
    cpu_items = r.cpu_items()
    for a in r.arms:
        ok = [x.flow for x in r.runs if x.arm == a["name"] and x.flow.ok]
        gp = [f.goodput_bps / 1e6 for f in ok if f.goodput_bps]
        rt = [float(f.retransmissions) for f in ok if f.retransmissions is not None]
        acks = [v for f in ok if (v := f.ack_ratio()) is not None]
        packets = [f.packets() for f in ok]
        cpu = cpu_summary(cpu_items[a["name"]]) if cpu_items[a["name"]] else {}
        ce = [
            float((x.bottleneck or {})["ce_marked"])
            for x in r.runs
            if x.arm == a["name"] and x.flow.ok and "ce_marked" in (x.bottleneck or {})
        ]
        marking = bool(r.condition.get("ecn_threshold"))
        summary[a["name"]] = ArmBulk(
            arm=a["name"],
            ack_ratio_mean=_mean(acks),
            client_packets_mean=_mean([float(c) for c, _ in packets if c is not None]),
            server_packets_mean=_mean([float(s) for _, s in packets if s is not None]),
            cpu_ms={k: v.get("total_ms") for k, v in cpu.items()},
            cpu_ms_per_mb={k: v.get("ms_per_mb") for k, v in cpu.items()},
            **counter_totals([f.counters for f in ok]),
            n=len(ok),
            goodput_mbit_mean=_mean(gp),
            goodput_mbit_sd=_sd(gp),
            goodput_mbit_median=statistics.median(gp) if gp else None,
            completion_s_mean=_mean([f.completion_s for f in ok if f.completion_s]),
            retransmissions_mean=_mean(rt),
            ce_marks_mean=_mean(ce) if marking else None,
            of_ideal=(statistics.fmean(gp) * 1e6 / r.ideal_goodput_bps)
            if gp and r.ideal_goodput_bps
            else None,
        )
    comparisons: Comparisons = {}
    for ref, cand in _pairs(r.arms, extra_pairs):
        cmp: dict[str, Comparison] = {}
        for metric in ("completion_s", "goodput_bps"):
            vals = {
                n: [
                    float(getattr(x.flow, metric))
                    for x in r.runs
                    if x.arm == n and x.flow.ok and getattr(x.flow, metric)
                ]
                for n in (ref, cand)
            }
            cmp[metric] = compare(
                vals[ref],
                vals[cand],
                planned=r.reps,
                alpha=alpha,
                test=test,
                reference_arm=ref,
                candidate_arm=cand,
            )
        comparisons[f"{ref}/{cand}"] = cmp
    return BulkSummary(**(dict(r) | {"summary": summary, "comparisons": comparisons}))


def _pairs(
    arms: list[dict[str, Any]], extra: list[tuple[str, str]] | None
) -> list[tuple[str, str]]:
    """The page cells' pairs (``quicbed.spec.arms.pairs``) of a stored record's arms."""
    return pairs(arms, own_pairs(extra, (a["name"] for a in arms)))


def compete_summary(
    r: CompeteResult,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    extra_pairs: list[tuple[str, str]] | None = None,
) -> CompeteSummary:
    """``r`` with per-arm shares over its repetitions, Jain's index's mean, and per pair
    of arms the comparison of their flows' mean steady throughput per repetition (the
    report and verify call this on a stored record)."""
    counts = dict(r.groups)
    per_flow: dict[str, list[float]] = {a: [] for a in counts}
    shares: dict[str, list[float]] = {a: [] for a in counts}
    for run in r.runs:
        if not run.steady_bps or run.spoiled:
            continue
        for a in counts:
            mine = [
                run.steady_bps[f.flow] for f in run.flows if f.arm == a and f.flow in run.steady_bps
            ]
            if mine:
                per_flow[a].append(statistics.fmean(mine) / 1e6)
                shares[a].append(run.arm_shares.get(a, 0.0))
    total = sum(counts.values())
    acks: dict[str, list[float]] = {a: [] for a in counts}
    for run in r.runs:
        for f in run.flows:
            if f.ok and not run.spoiled and f.arm in acks and (v := f.ack_ratio()) is not None:
                acks[f.arm].append(v)
    summary = {
        a: ArmCompete(
            arm=a,
            ack_ratio_mean=_mean(acks[a]),
            n_flows=n,
            n=len(shares[a]),
            fair_share=n / total,
            share_mean=_mean(shares[a]),
            share_sd=_sd(shares[a]),
            per_flow_mbit_mean=_mean(per_flow[a]),
            per_flow_mbit_sd=_sd(per_flow[a]),
        )
        for a, n in counts.items()
    }
    jains = [run.jain for run in r.runs if run.jain is not None and not run.spoiled]
    comparisons: Comparisons = {}
    for ref, cand in _pairs(r.arms, extra_pairs):
        comparisons[f"{ref}/{cand}"] = {
            "per_flow_bps": compare(
                [v * 1e6 for v in per_flow[ref]],
                [v * 1e6 for v in per_flow[cand]],
                planned=len([x for x in r.runs if not x.replacement]),
                alpha=alpha,
                test=test,
                reference_arm=ref,
                candidate_arm=cand,
            )
        }
    return CompeteSummary(
        **(
            dict(r)
            | {
                "summary": summary,
                "jain_mean": _mean(jains),
                "jain_sd": _sd(jains),
                "comparisons": comparisons,
            }
        )
    )


def stored_transfer(
    store: Store,
    cell_id: str,
    attempt: int,
    *,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    extra_pairs: list[tuple[str, str]] | None = None,
) -> BulkSummary | CompeteSummary:
    """A transfer cell's record from the store, with its summary computed from its runs."""
    row = store.transfer(cell_id, attempt)
    if row is None:
        raise QuicbedError(f"cell {cell_id} attempt {attempt} has no transfer record")
    if row["kind"] == "bulk":
        return bulk_summary(BulkResult.model_validate(row["result"]), alpha, test, extra_pairs)
    return compete_summary(CompeteResult.model_validate(row["result"]), alpha, test, extra_pairs)
