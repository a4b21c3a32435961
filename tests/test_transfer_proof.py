"""Bulk flows and compete repetitions proven as page loads are (issue 38): one the link or
the host spoiled is kept with its figures named, counts in no summary, and is replaced
after the planned ones. The first tests read made-up records; the last stops the real
emulator (SIGSTOP) during a chosen flow and a chosen repetition."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_transfer_cells import _compete_record, _flow

from quicbed.analysis.transfers import compete_summary
from quicbed.model.link import make_condition
from quicbed.results.linkload import shortfall
from quicbed.results.transfers import BulkResult, BulkRun, CompeteResult, link_line
from quicbed.run.bulk import _replaced
from quicbed.servers.webserver import WebServer
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

LATE = {"spoiled": True, "reasons": ["the link was 190.0 ms late during this load"]}


def _late(**more: object) -> dict[str, object]:
    """A spoiled proof with one direction 190 ms late (a 200 ms stall)."""
    return {
        **LATE,
        "late_tolerance_ms": 15.0,
        "directions": {"down": {"late_max_ms": 190.0, "late_p99_ms": 190.0}},
        "host": {"steal_pct": 0.0},
        **more,
    }


def _on_time(**more: object) -> dict[str, object]:
    return {
        "spoiled": False,
        "reasons": [],
        "late_tolerance_ms": 15.0,
        "directions": {"down": {"late_max_ms": 1.2, "late_p99_ms": 0.8}},
        "host": {"steal_pct": 0.0},
        **more,
    }


def _run(arm: str, rep: int, link: dict[str, object], ok: bool = True) -> BulkRun:
    f = _flow(f"{arm}-{rep}", arm, 9e6, 2.0)
    f.ok = ok
    return BulkRun(arm=arm, rep=rep, seq=rep, flow=f, link=link)


def test_an_arm_owes_one_flow_per_spoiled_flow_up_to_its_bound() -> None:
    runs = [_run("h2", 0, _late()), _run("h3", 0, _on_time()), _run("h2", 1, _on_time())]
    assert _replaced(["h2", "h3"], 1, runs) == ["h2"]
    # the bound: none replaced
    assert _replaced(["h2", "h3"], 0, runs) == []
    # a spoiled replacement is owed too, until the bound
    runs.append(_run("h2", 2, _late(replacement=True)))
    assert _replaced(["h2", "h3"], 2, runs) == ["h2"]
    assert _replaced(["h2", "h3"], 1, runs) == []
    runs.append(_run("h2", 3, _on_time(replacement=True)))
    assert _replaced(["h2", "h3"], 2, runs) == []
    # a flow that failed its own checks as well is not the link's to replace
    mixed = [_run("h3", 0, _late(own_reasons=1), ok=False)]
    assert _replaced(["h3"], 1, mixed) == []


def test_a_spoiled_compete_repetition_counts_in_no_summary() -> None:
    whole = compete_summary(_compete_record())
    r = _compete_record()
    r.runs = [x.model_copy(update={"link": _on_time()}) for x in r.runs]
    r.runs[1] = r.runs[1].model_copy(update={"link": _late()})
    r.runs.append(r.runs[2].model_copy(update={"rep": 3, "link": _on_time(replacement=True)}))
    got = compete_summary(r)
    assert got.summary["h3"].n == 3  # 0, 2 and the replacement; 1 left out
    assert got.summary["h3"].share_mean != whole.summary["h3"].share_mean
    c = got.comparisons["h2/h3"]["per_flow_bps"]
    assert c.reference.n == c.candidate.n == 3
    line = link_line(r, 12.0)
    assert line is not None
    assert "1.20 ms late in the median of the repetitions, 190.0 ms at worst" in line
    assert "1 of 4 repetitions spoiled, 1 measured in their place" in line
    assert "waited 12 s for a quiet host" in line
    assert "planned" not in line  # it reached its 3


def test_a_bulk_arm_short_of_its_runs_says_so() -> None:
    runs = [
        _run("h2", 0, _late(), ok=False),
        _run("h3", 0, _on_time()),
        _run("h2", 1, _late(replacement=True), ok=False),
    ]
    r = BulkResult(
        created="now",
        condition=make_condition(rate_mbit=10, rtt_ms=36).model_dump(mode="json"),
        arms=[{"name": "h2", "transport": "tcp"}, {"name": "h3", "transport": "udp"}],
        object="bulk/2MB.bin",
        object_bytes=2 * 10**6,
        duration_s=None,
        reps=1,
        ideal_goodput_bps=None,
        runs=runs,
    )
    line = link_line(r, None)
    assert line is not None and "2 of 3 flows spoiled" in line
    assert "h2 has 0 of its 1 planned flows valid" in line
    assert shortfall([(x.arm, x.flow.ok, x.link) for x in runs], 1) == {"h2": (0, 1)}
    # records made before flows were proven: no line, nothing short
    old = r.model_copy(update={"runs": [x.model_copy(update={"link": {}}) for x in runs]})
    assert link_line(old, None) is None


@pytest.mark.root
@pytest.mark.slow
def test_a_stalled_flow_and_a_stalled_repetition_are_kept_invalid_and_replaced(
    shared_links: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulator stopped for 200 ms during h2's second bulk flow and during the first
    compete repetition: each is kept with the lateness named, left out of the numbers,
    and measured again after the planned ones; both cells end done. (The pause after a
    spoiled flow, quicbed.run.cell, is 1 s here instead of 10.)"""
    from conftest import SharedLinks, stall_emulator

    from quicbed.analysis.transfers import stored_transfer
    from quicbed.link import quiet
    from quicbed.results.store import Store

    monkeypatch.setattr(quiet, "FIRST_PAUSE_S", 1.0)

    assert isinstance(shared_links, SharedLinks)
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    bulk = make_cell(
        condition=cond,
        page="bulk/2MB.bin",
        kind="bulk",
        runs=2,
        warmup=0,
        arms=["h2", "h3"],
        transfer={"size": "2MB"},
    )
    compete = make_cell(
        condition=cond,
        page="bulk/10MB.bin",
        kind="compete",
        runs=2,
        warmup=0,
        arms=["h3", "h2"],
        transfer={"size": "10MB", "duration_s": 4, "flows": "h3x1,h2x1"},
    )
    at = {("h2", 1): 0.6, ("h3", 0): 2.6}  # seconds after the hook: inside the transfer

    def stall(cfg: object):  # type: ignore[no-untyped-def]
        def hook(arm: str, rep: int, servers: dict[str, WebServer]) -> None:
            if (arm, rep) not in at:
                return
            stall_emulator(LocalTestbed(shared_links.prefix_of(cfg)), at[arm, rep], 0.2)

        return hook

    got = {}
    for cfg in (bulk, compete):
        r = shared_links.run_cell(cfg, tmp_path / "res", fault=stall(cfg))
        assert r.status == "done", r.problem
        store = Store(tmp_path / "res")
        try:
            got[cfg.kind] = stored_transfer(store, r.cell_id, r.attempt)
        finally:
            store.close()
        assert r.spoiled, r.as_dict()  # the stalled one, named by the cell's result

    b = got["bulk"]
    assert isinstance(b, BulkResult)
    runs = {(x.arm, x.rep): x for x in b.runs}
    bad = runs["h2", 1]
    assert not bad.flow.ok and bad.link["spoiled"] and not bad.replacement
    late = max(d["late_max_ms"] or 0 for d in bad.link["directions"].values())
    assert late >= 100, bad.link
    assert f"the link was {late:.1f} ms late during this load" in (bad.flow.error or "")
    repl = runs["h2", 2]  # the first rep after the schedule's
    assert repl.replacement
    # the summary counts the valid flows only
    assert b.summary["h2"].n == sum(1 for x in b.runs if x.arm == "h2" and x.flow.ok)
    assert b.summary["h3"].n == sum(1 for x in b.runs if x.arm == "h3" and x.flow.ok)
    assert all(x.link.get("late_tolerance_ms") == 15.0 for x in b.runs)

    c = got["compete"]
    assert isinstance(c, CompeteResult)
    first = c.runs[0]
    assert first.spoiled and not first.replacement
    assert any("ms late during this load" in why for why in first.link["reasons"])
    assert c.runs[2].replacement and c.runs[2].rep == 2
    assert c.summary["h3"].n == sum(1 for x in c.runs if x.steady_bps and not x.spoiled)
    assert c.summary["h3"].n < len(c.runs)
