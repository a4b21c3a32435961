"""Background flows of a page cell (issue 41): their spelling, identity, planning, the
per-load figures' arithmetic and the report's reading of them. The real flows beside
real loads are tests/test_background_cell.py's."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from made_rows import cell_row

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.report.build import heat_axes
from quicbed.results.linkload import background_share
from quicbed.results.rows import RunRow
from quicbed.run.background import bytes_at
from quicbed.run.cell import _page_span
from quicbed.spec.background import BackgroundFlow, background_text, parse_background
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec, plan

ROOT = Path(__file__).resolve().parent.parent
COND = make_condition(rate_mbit=10, rtt_ms=36)


def test_the_spelling_reads_back_as_written() -> None:
    text = "bulk:tcp:bbr,chunks:quic:cubic:size=1MB:every=2,bulk:quic:reno:size=50MB"
    flows = parse_background(text)
    assert [f.label() for f in flows] == [
        "bulk tcp bbr",
        "chunks quic cubic 1MB/2s",
        "bulk quic reno 50MB",
    ]
    assert background_text(flows) == text
    assert parse_background(background_text(flows)) == flows
    assert flows[0].size == "10MB" and flows[1].every_s == 2.0
    # a spec's mappings, "none" and the empty string
    assert parse_background([{"kind": "bulk", "transport": "tcp", "cc": "cubic"}]) == (
        BackgroundFlow(kind="bulk", transport="tcp", cc="cubic"),
    )
    assert parse_background("none") == () == parse_background("")
    assert background_text(()) == "none"
    assert parse_background("chunks:tcp:cubic:every=1.5s:direction=down")[0].every_s == 1.5
    # an upload says so; a download's dump has no direction (cells before uploads keep
    # their IDs)
    up, down = parse_background("bulk:tcp:cubic:direction=up,bulk:tcp:cubic:direction=down")
    assert (up.label(), up.text()) == ("bulk tcp cubic up", "bulk:tcp:cubic:direction=up")
    assert (down.label(), down.text()) == ("bulk tcp cubic", "bulk:tcp:cubic")
    assert up.model_dump()["direction"] == "up" and "direction" not in down.model_dump()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("bulk", "is not KIND:TRANSPORT:CC"),
        ("bulk:tcp:", "is not KIND:TRANSPORT:CC"),
        ("stream:tcp:cubic", "kind 'stream'"),
        ("bulk:sctp:cubic", "transport 'sctp'"),
        ("bulk:tcp:vegas", "the kernel's TCP has bbr, cubic, reno"),
        ("bulk:quic:bbr", "quic-go has cubic, reno"),
        ("chunks:tcp:cubic", "needs every=SECONDS"),
        ("bulk:tcp:cubic:every=1", "every is for chunks flows"),
        ("chunks:tcp:cubic:every=61", "at most 60"),
        ("chunks:tcp:cubic:every=-1", "> 0"),
        ("chunks:tcp:cubic:every=soon", "every 'soon' is not a number"),
        ("bulk:tcp:cubic:size=1TB", "size '1TB'"),
        ("bulk:tcp:cubic:size", "'size' is not KEY=VALUE"),
        ("bulk:tcp:cubic:rate=5", "unknown setting 'rate'"),
        ("bulk:tcp:cubic:direction=sideways", "direction 'sideways' is not down"),
        (",".join(["bulk:tcp:cubic"] * 5), "at most 4 flows per cell (got 5)"),
    ],
)
def test_a_bad_flow_is_named(text: str, needle: str) -> None:
    with pytest.raises(QuicbedError, match=None) as got:
        parse_background(text)
    assert needle in str(got.value), got.value
    assert "\n" not in str(got.value)


def test_the_flows_are_part_of_the_cells_identity() -> None:
    """A cell without background keeps the ID it had before the setting existed (the key
    is left out of the ID while empty); each background is a cell of its own."""
    plain = make_cell(condition=COND, page="1mb")
    # tests/test_preset_identity.py holds every preset cell's ID from before the setting
    assert plain.cell_id() == make_cell(condition=COND, page="1mb", background="none").cell_id()
    ids = {
        make_cell(condition=COND, page="1mb", background=b).cell_id()
        for b in ("", "bulk:tcp:cubic", "bulk:tcp:bbr", "bulk:tcp:bbr:size=20MB", "bulk:quic:cubic")
    }
    assert len(ids) == 5 and plain.cell_id() in ids
    # the same flows however they are written: one cell
    a = make_cell(condition=COND, page="1mb", background="chunks:tcp:cubic:every=2:size=1MB")
    b = make_cell(
        condition=COND,
        page="1mb",
        background=[
            {"kind": "chunks", "transport": "tcp", "cc": "cubic", "size": "1MB", "every_s": 2}
        ],
    )
    assert a.cell_id() == b.cell_id()


def test_a_transfer_cell_or_a_link_without_a_bottleneck_refuses_background() -> None:
    with pytest.raises(QuicbedError, match="background flows run beside page loads"):
        make_cell(
            condition=COND,
            page="bulk/1MB.bin",
            kind="bulk",
            warmup=0,
            transfer={"size": "1MB"},
            background="bulk:tcp:cubic",
        )
    with pytest.raises(QuicbedError, match="shaper none: there is no bottleneck"):
        make_cell(
            condition=make_condition(rate_mbit=None, rtt_ms=0),
            page="1mb",
            shaper="none",
            background="bulk:tcp:cubic",
        )


def test_a_scenarios_background_is_a_grid_axis(tmp_path: Path) -> None:
    """Each entry one cell's flows, "none" a cell without; the preset plans the long-look
    pages at two rates against four backgrounds, and a spec without the key keeps its
    digest (test_spec's old-digest test holds the demo's)."""
    spec = load_spec(ROOT / "sweeps" / "cross-traffic.yaml")
    cells = plan(spec)
    assert len(cells) == 2 * 13 * 4
    got = {background_text(pc.config.background) for pc in cells}
    assert got == {
        "none",
        "bulk:tcp:cubic",
        "bulk:tcp:bbr",
        "chunks:tcp:cubic:size=625KB:every=2",
    }
    assert {pc.config.arms for pc in cells} == {("h2", "h3", "h3-quiche", "h3-envoy")}
    # the backgrounds of one link condition are planned together: one receipt serves them
    keys = [pc.config.link_key() for pc in cells]
    assert keys == sorted(keys, key=keys.index)
    text = (ROOT / "sweeps" / "demo.yaml").read_text()
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text(text + '    background: [none, "bulk:tcp:bbr"]\n')
    a, b = load_spec(tmp_path / "a.yaml"), load_spec(tmp_path / "b.yaml")
    assert a.digest() == "435400e99837d472" != b.digest()
    assert len(plan(b)) == 2 * len(plan(a))


def test_bytes_between_two_instants_interpolate_the_samples() -> None:
    s = [(1_000, 0), (1_100, 1000), (1_200, 1000), (1_300, 4000)]
    assert bytes_at(s, 1_050) == 500
    assert bytes_at(s, 1_100) == 1000
    assert bytes_at(s, 1_150) == 1000  # the flow idle between two chunks
    assert bytes_at(s, 1_250) == 2500
    assert bytes_at(s, 900) == 0 and bytes_at(s, 5_000) == 4000  # clamped at both ends


def test_the_span_is_the_pages_own_where_the_har_has_it() -> None:
    started = datetime(2026, 12, 5, 23, 0, 1, 250000, tzinfo=UTC)
    har = {"log": {"pages": [{"startedDateTime": started.isoformat().replace("+00:00", "Z")}]}}
    t0, t1, span = _page_span(har, {"onload_ms": 640.5}, 1, 2)
    assert span == "page"
    assert t0 == int(started.timestamp() * 1e9) and t1 - t0 == 640_500_000
    # no HAR or no onLoad (a failed load): the runner's own readings around the call
    assert _page_span(None, {"onload_ms": 5.0}, 1, 2) == (1, 2, "call")
    assert _page_span(har, {"onload_ms": None}, 1, 2) == (1, 2, "call")


def _run(arm: str, valid: bool, shares: list[float | None], warm: bool = False) -> RunRow:
    return RunRow(
        cell_id="c",
        attempt=1,
        arm=arm,
        rep=0,
        seq=0,
        warmup=warm,
        valid=valid,
        reason="",
        plt_ms=1.0,
        detail={"background": [{"flow": f"bg{i}", "share": s} for i, s in enumerate(shares)]},
    )


def test_the_share_is_the_mean_over_an_arms_valid_measured_loads() -> None:
    runs = [
        _run("h2", True, [0.5, 0.2]),
        _run("h2", True, [0.3, 0.2]),
        _run("h2", False, [0.9, 0.0]),  # invalid: not counted
        _run("h2", True, [0.9, 0.0], warm=True),  # a warm-up: not counted
        _run("h3", True, [None, 0.1]),  # a link without a rate has no share
    ]
    assert background_share(runs, "h2") == pytest.approx(0.6)
    assert background_share(runs, "h3") is None
    assert background_share(runs, "h3-quiche") is None
    # an upload's share is of the uplink: never summed with a download's
    both = _run("h2", True, [0.7, 0.4])
    both.detail["background"][1]["direction"] = "up"
    assert background_share([both], "h2") == pytest.approx(0.7)
    assert background_share([both], "h2", "up") == pytest.approx(0.4)


def test_a_heatmap_group_that_varies_its_background_is_split_by_it() -> None:
    rows = [
        cell_row(rate_mbit=r, page=p, background=b)
        for r in (10.0, 50.0)
        for p in ("5kb", "1mb")
        for b in ("none", "bulk:tcp:bbr")
    ]
    assert heat_axes(rows) == ("rate", "page", ["background"])
    assert heat_axes([r for r in rows if r.background == "none"]) == ("rate", "page", [])
