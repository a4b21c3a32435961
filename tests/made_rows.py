"""A report cell row for tests that draw or group rows without measuring a cell: every
field a row needs, for a 10 Mbit/s, 36 ms, 5 KB cell, overridden by what a test is about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quicbed.report.cellrow import CellRow


def cell_row(**fields: Any) -> CellRow:
    base: dict[str, Any] = {
        "scenario": "s",
        "cell_id": "c",
        "attempt": 1,
        "attempts": 1,
        "page": "5kb",
        "rate_mbit": 10.0,
        "rtt_ms": 36.0,
        "loss_pct": 0.0,
        "jitter_ms": 0.0,
        "jitter_kind": "none",
        "queue": "2bdp",
        "mode": "0rtt",
        "runs": 5,
        "cc": "cubic",
    }
    return CellRow(**{**base, **fields})


def bulk_config(
    cond: Any, text: str = "h2,h3", runs: int = 2, size: str = "2MB", **settings: Any
) -> Any:
    """A bulk cell of ``size`` downloads, ``runs`` per arm, arms as ``--arms`` spells them,
    and any other cell setting (``shaper``, ``offloads``) as given: what ``quicbed bulk``
    makes of the same options."""
    from quicbed.spec.arms import parse_cli
    from quicbed.spec.bulkobjects import object_path
    from quicbed.spec.cellconfig import make_cell

    names, arm_settings = parse_cli(text)
    return make_cell(
        condition=cond,
        page=object_path(size),
        kind="bulk",
        runs=runs,
        warmup=0,
        arms=names,
        arm_settings=arm_settings,
        transfer={"size": size},
        **settings,
    )


def measured_transfer(
    cfg: Any, folder: Path, links: Any, *, done: bool = True, **kwargs: Any
) -> Any:
    """A bulk or compete ``cfg`` measured for real into ``folder`` over the suite's shared
    link of its condition (``conftest.SharedLinks``: a link that fails raises
    ``LinkNotHeld`` and the test runs again), done, and its stored record (BulkResult or
    CompeteResult, what ``quicbed bulk`` and ``quicbed compete`` read back). ``done``: the
    cell must end done, as those commands require (a cell whose arm fails on purpose need
    not); ``kwargs`` go to ``run_cell`` (traces, profile)."""
    from quicbed.analysis.transfers import stored_transfer
    from quicbed.results.store import Store

    r = links.run_cell(cfg, folder, **kwargs)
    assert r.status == "done" or not done, r.problem
    store = Store.open_readonly(folder)
    try:
        return stored_transfer(store, r.cell_id, r.attempt)
    finally:
        store.close()


def measured_bulk(cfg: Any, folder: Path, links: Any) -> Any:
    """``measured_transfer`` of a bulk cell: its stored BulkResult."""
    from quicbed.results.transfers import BulkResult

    rec = measured_transfer(cfg, folder, links, done=False)
    assert isinstance(rec, BulkResult), rec
    return rec


def unspoiled_flows(rec: Any) -> dict[tuple[str, int], Any]:
    """A bulk record's flows by (arm, rep), less those the link or the host spoiled
    (quicbed.link.loadproof), which the cell replaced by flows measured after its
    schedule: what the cell's verdicts rest on. An arm left with fewer flows than it
    scheduled (a replacement spoiled too) raises ``LinkNotHeld``: the test runs again."""
    from conftest import LinkNotHeld

    from quicbed.results.linkload import spoiled_only

    kept = {(x.arm, x.rep): x.flow for x in rec.runs if not spoiled_only(x.link)}
    for arm in {x.arm for x in rec.runs}:
        scheduled = sum(1 for x in rec.runs if x.arm == arm and not x.replacement)
        if sum(1 for a, _ in kept if a == arm) < scheduled:
            raise LinkNotHeld(f"{arm}: flows spoiled by the link or the host, replacements too")
    return kept


def _flow(arm: str, rep: int, mbit: float) -> Any:
    from quicbed.results.transfers import FlowResult

    return FlowResult(
        flow=f"{arm}-{rep}",
        arm=arm,
        protocol="h3",
        ok=True,
        bytes=10**6,
        completion_s=1.0,
        goodput_bps=mbit * 1e6,
        samples=[(1.0, 10**6)],
    )


def store_bulk_cell(
    folder: Path, scenario: str, cond: Any, text: str, mbits: dict[str, float], **settings: Any
) -> None:
    """A bulk cell of scenario ``scenario`` stored in ``folder`` as if measured: arms as
    ``--arms`` spells them, two verified flows per arm at ``mbits`` (and 1 Mbit/s more),
    other cell settings as given, for tests that build a report from stored records
    only."""
    from quicbed.results.store import Store
    from quicbed.results.transfers import BulkResult, BulkRun

    cfg = bulk_config(cond, text, **settings)
    runs = [
        BulkRun(arm=a, rep=rep, seq=2 * i + rep, flow=_flow(a, rep, m + rep))
        for i, (a, m) in enumerate(mbits.items())
        for rep in range(2)
    ]
    rec = BulkResult(
        created="now",
        condition=cfg.condition.model_dump(mode="json"),
        arms=[a.as_dict() for a in cfg.resolved_arms()],
        object="bulk/2MB.bin",
        object_bytes=2 * 10**6,
        duration_s=None,
        reps=2,
        ideal_goodput_bps=None,
        runs=runs,
    )
    store = Store(folder, create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    store.add_scenarios([(cid, scenario)])
    att = store.new_attempt(cid, {"quicbed": "test"})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    store.set_transfer(cid, att, "bulk", rec.model_dump(mode="json"))
    store.finish_attempt(cid, att, "done")
    store.close()
