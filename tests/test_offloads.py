"""Interface offloads as a cell setting (quicbed.roles.offloads): refused by name where
they cannot be sound, set on every role's interface of an unshaped link, read back
around every flow, and a flow whose offload changed behind the cell is invalid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.roles import offloads
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

ON = {"gso": "on", "gro": "on", "tso": "on", "tx": "on"}


def _bulk(**kw: Any) -> Any:
    return make_cell(
        **{
            "condition": make_condition(),
            "page": "bulk/2MB.bin",
            "kind": "bulk",
            "runs": 2,
            "warmup": 0,
            "arms": ("h2", "h3"),
            "transfer": {"size": "2MB"},
        }
        | kw
    )


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"offloads": "lro=on", "shaper": "none"}, r"unknown offload 'lro' \(one of gso, gro"),
        ({"offloads": "gso=yes", "shaper": "none"}, "gso='yes': the value is on or off"),
        ({"offloads": "gso", "shaper": "none"}, "'gso' is not NAME=on|off"),
        ({"offloads": {"gro": 1}, "shaper": "none"}, "gro=1: the value is on or off"),
        ({"offloads": "gso=on"}, "offloads gso=on with shaper auto: gso on needs shaper none"),
        ({"offloads": {"tso": True}, "shaper": "userspace"}, "tso=on with shaper userspace"),
    ],
)
def test_bad_offloads_are_refused_by_name(kw: dict[str, Any], named: str) -> None:
    with pytest.raises(QuicbedError, match=named):
        _bulk(**kw)


def test_offloads_are_the_cells_and_the_links_identity() -> None:
    plain = _bulk(shaper="none")
    assert _bulk(shaper="none", offloads={}).cell_id() == plain.cell_id()
    on = _bulk(shaper="none", offloads="tx=on,gso=on,gro=on,tso=on")
    assert on.offloads == dict(sorted(ON.items()))
    assert _bulk(shaper="none", offloads=ON).cell_id() == on.cell_id()  # either spelling
    assert on.cell_id() != plain.cell_id()
    assert on.link_key() != plain.link_key()
    assert plain.link_key() == _bulk(shaper="none").link_key()
    # YAML 1.1 reads a bare on/off as a boolean
    assert offloads.parse({"gso": True, "gro": False}) == {"gro": "off", "gso": "on"}
    # off is what a shaping link needs anyway: allowed with any shaper
    assert _bulk(offloads="gso=off").offloads == {"gso": "off"}


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.built
def test_an_unshaped_bulk_cell_with_offloads_on(testbed: LocalTestbed, tmp_path: Path) -> None:
    """Every interface gets the offloads for the cell and its normal state back after;
    each flow stores the read-back; a flow whose offload is switched off behind the cell
    (here the client's GRO, before the last flow) is invalid, naming it."""
    from quicbed.analysis.transfers import stored_transfer
    from quicbed.results.linkload import spoiled_only
    from quicbed.results.store import Store
    from quicbed.run.cell import run_cell

    tb = testbed
    cfg = _bulk(shaper="none", offloads=ON)
    last = cfg.schedule()[-1]

    def flip(arm: str, rep: int, servers: object) -> None:
        # off for the last scheduled flow only: a flow replaced after it (the busy host
        # spoiled one) gets GRO back, or its arm could end with no valid flow at all
        state = "off" if (arm, rep) == last else "on"
        tb.exec("client", ["ethtool", "-K", "eth0", "gro", state])

    r = run_cell(cfg, tmp_path / "r", testbed=tb, receipt_tcp_seconds=1, fault=flip)
    assert r.status == "done", r.problem
    store = Store.open_readonly(tmp_path / "r")
    try:
        result = stored_transfer(store, r.cell_id, r.attempt)
    finally:
        store.close()
    # the schedule's flows (a flow the busy host spoiled is kept and replaced at the end)
    runs = [x for x in result.runs if not x.replacement]
    assert len(runs) == 4
    for run in runs[:-1]:
        f = run.flow
        if spoiled_only(run.link):
            continue
        assert f.ok, f.error
        seen = f.evidence["offloads"]
        assert seen["set"] == ON
        for when in ("before", "after"):
            assert set(seen[when]) == {"server:eth0", "bridge:srv", "bridge:cli", "client:eth0"}
            assert all(feats == ON for feats in seen[when].values()), seen[when]
    bad = runs[-1].flow
    assert (runs[-1].arm, runs[-1].rep) == last
    assert not bad.ok
    assert "offload gro is off on client:eth0 (expected on)" in (bad.error or "")
    receipt = result.receipt
    assert receipt["tuning"]["offloads_set"] == ON
    assert receipt["tuning"]["offloads"]["client:eth0"]["generic-receive-offload"] == "on"
    # the testbed's own state is back: every offload off on every veth end
    assert all(v == "off" for feats in tb.check_offloads().values() for v in feats.values())


@pytest.mark.root
def test_the_link_sets_the_named_offloads_and_puts_them_back(testbed: LocalTestbed) -> None:
    """Only the offloads the cell names are set (the others keep the testbed's state),
    on every veth end, and every one is as before once the link is gone."""
    from quicbed.link.session import shaped_link

    with shaped_link(testbed, make_condition(), "none", offloads_set={"tso": "on"}) as link:
        seen = offloads.read_all(testbed)
        assert set(seen) == {"server:eth0", "bridge:srv", "bridge:cli", "client:eth0"}
        assert all(f["tso"] == "on" and f["gso"] == "off" for f in seen.values()), seen
        assert link.tuning["offloads_set"] == {"tso": "on"}
        testbed.exec("server", ["ethtool", "-K", "eth0", "tso", "off"])
        watch = link.offload_watch()
        watch.begin()
        _, reasons = watch.end()
        assert reasons == ["offload tso is off on server:eth0 (expected on)"]
    testbed.check_offloads()  # all off again (raises naming any that is not)


def test_a_spec_scenario_takes_offloads_as_a_grid_axis(tmp_path: Path) -> None:
    from quicbed.spec.sweepspec import load_spec, plan

    body = """format: 1
name: t
shaper: SHAPER
scenarios:
  offl:
    kind: bulk
    rate: [unlimited]
    rtt: [0]
    objects: [2MB]
    arms: [h2, h3]
    offloads:
      - {gso: off, gro: off}
      - {gso: on, gro: on}
"""
    spec = tmp_path / "s.yaml"
    spec.write_text(body.replace("SHAPER", "none"))
    cells = [c.config for c in plan(load_spec(spec))]
    assert [c.offloads for c in cells] == [
        {"gro": "off", "gso": "off"},
        {"gro": "on", "gso": "on"},
    ]
    assert cells[0].link_key() != cells[1].link_key()
    spec.write_text(body.replace("SHAPER", "auto"))
    with pytest.raises(QuicbedError, match=r"scenarios.offl: .*gro=on,gso=on with shaper auto"):
        load_spec(spec)


def test_the_report_draws_goodput_per_offload_setting(tmp_path: Path) -> None:
    """A scenario whose cells share an unshaped link and differ in their offloads: one
    group of bars per setting, one bar per arm; a scenario of one setting draws none.
    From stored records only."""
    from made_rows import store_bulk_cell

    from quicbed.model.link import make_condition
    from quicbed.report.build import build

    cond = make_condition(rate_mbit=None, rtt_ms=0)
    for setting, mbits in (("gso=off,gro=off", (900.0, 700.0)), ("gso=on,gro=on", (2000.0, 950.0))):
        h2, h3 = mbits
        store_bulk_cell(
            tmp_path, "offl", cond, "h2,h3", {"h2": h2, "h3": h3}, shaper="none", offloads=setting
        )
    store_bulk_cell(tmp_path, "one", cond, "h2", {"h2": 1.0}, shaper="none", offloads="gso=on")
    report = build(tmp_path)
    shown = [f["shows"] for f in report.figures if f["shows"].get("axis")]
    assert [(s["scenario"], s["axis"]) for s in shown] == [("offl", "offloads")]
    svg = (tmp_path / "report" / "figures" / "param-offl.svg").read_text()
    assert "gso=off" in svg and "gro=on" in svg and "h2" in svg and "h3" in svg
    assert "param-offl" in (tmp_path / "report" / "index.html").read_text()


@pytest.mark.root
@pytest.mark.slow
def test_the_ssh_testbed_sets_its_endpoints_offloads(prefix: str) -> None:
    """Over ssh, on the endpoints' experiment interfaces (the bridge node's ports are not
    set), read back, and put back after."""
    from quicbed.link.session import shaped_link
    from quicbed.testbed.ssh import SshTestbed
    from quicbed.testbed.sshlab import SshLab

    lab = SshLab(prefix)
    try:
        tb = SshTestbed.load(lab.up())
        try:
            assert tb.offload_interfaces() == {"server": ("eth0",), "client": ("eth0",)}
            with shaped_link(tb, make_condition(), "none", offloads_set={"gro": "on"}) as link:
                seen = offloads.read_all(tb)
                assert {k: v["gro"] for k, v in seen.items()} == {
                    "server:eth0": "on",
                    "client:eth0": "on",
                }
                assert link.tuning["offloads"]["server:eth0"]["generic-receive-offload"] == "on"
            assert {v["gro"] for v in offloads.read_all(tb).values()} == {"off"}
        finally:
            tb.close()
    finally:
        lab.down()


def test_the_arms_gso_knob_is_refused_with_the_interfaces_gso_on() -> None:
    """quic-go's gso is verified by its interface counting the segments of a GSO
    datagram, which an interface with GSO on does not do."""
    from quicbed.spec.arms import parse_cli

    names, settings = parse_cli("h3-g:stack=quic-go:gso=true")
    kw: dict[str, Any] = {"arms": names, "arm_settings": settings, "shaper": "none"}
    with pytest.raises(QuicbedError, match=r"arm h3-g: its gso is verified .* gso=on"):
        _bulk(offloads="gso=on", **kw)
    assert _bulk(offloads="gro=on", **kw).offloads == {"gro": "on"}
