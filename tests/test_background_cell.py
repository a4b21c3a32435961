"""Real background flows beside real page loads (issue 41): quicbed-h3server and
quicbed-bulk through the shared 10 Mbit/s, 36 ms link, Chromium loading the page over
h2 and h3, every load's figures and the flows' own account of what they ran."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import LinkNotHeld, SharedLinks

from quicbed.model.link import make_condition
from quicbed.results.linkload import load_proof, spoiled_only
from quicbed.results.store import Store
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

COND = make_condition(rate_mbit=10, rtt_ms=36)  # the suite's shared link


def _stored(folder: Path) -> tuple[list[Any], dict[str, Any]]:
    store = Store.open_readonly(folder)
    try:
        runs = store.all_runs()
        (att,) = [store.attempt(c, 1) for c in store.cells()]
        return runs, att.provenance or {}
    finally:
        store.close()


def _left_running(prefix: str) -> list[str]:
    """Processes still in the shared testbed's server and client namespaces (its
    emulator lives in the bridge's)."""
    tb = LocalTestbed(prefix)
    out = []
    for role in ("server", "client"):
        cp = subprocess.run(["ip", "netns", "pids", tb.ns(role)], capture_output=True, text=True)
        out += [f"{role}:{p}" for p in cp.stdout.split()]
    return out


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_every_load_stores_each_background_flows_share_and_the_flows_run_their_own_cc(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """A BBR download (its own socket's CC, beside page arms on the hosts' CUBIC) and a
    video-like QUIC upload: every load valid, with both flows running all through it;
    what the download and the page carried fit in the downlink; each flow ran what it
    names by its sending side's account (the server's kernel, the uploading client's
    quic-go), and the upload's bytes are its receiver's."""
    cfg = make_cell(
        condition=COND,
        page="100kb",
        arms=["h2", "h3"],
        runs=3,
        warmup=1,
        background="bulk:tcp:bbr,chunks:quic:cubic:size=200KB:every=1:direction=up",
    )
    r = shared_links.run_cell(cfg, tmp_path / "res")
    assert r.status == "done", r.problem
    assert not r.invalid, r.invalid
    for arm in ("h2", "h3"):  # the download's share of the downlink, the upload's of the uplink
        v = r.verified[arm]
        assert 0 < v["background_share"] <= 1.0 and 0 < v["background_share_up"] <= 1.0, v
    runs, prov = _stored(tmp_path / "res")
    measured = [x for x in runs if not x.warmup]
    # every load valid but those the link or the host spoiled (kept, replaced: their
    # figures are checked below all the same)
    if sum(x.valid for x in measured) < 6:  # spoiled past the cell's bound: checked nothing
        raise LinkNotHeld(f"loads spoiled past the bound: {[x.reason for x in measured]}")
    assert all(x.valid or spoiled_only(load_proof(x.detail)) for x in measured), measured
    for x in runs:
        bg = x.detail["background"]
        assert [b["flow"] for b in bg] == ["bg1", "bg2"], bg
        assert all(b["running"] and b["span"] == "page" for b in bg), bg
        assert bg[0]["spec"] == "bulk:tcp:bbr" and bg[0]["bytes"] > 0, bg
        assert abs(bg[0]["seconds"] * 1000 - x.onload_ms) < 1, (bg, x.onload_ms)
        # the page's bytes and the download's within what the downlink carries over the
        # load (measured here: at most 0.99 of it over 20 loads)
        page_bps = x.bytes * 8 / bg[0]["seconds"]
        assert page_bps / 10e6 + bg[0]["share"] <= 1.1, (bg, x.bytes)
        # the upload's own direction; a 200 KB chunk a second is idle through many loads
        assert 0 <= bg[1]["share"] <= 1.1, bg
        # the page arm's own TCP still ran the hosts' CC
        if x.arm == "h2":
            assert x.detail["server"]["cc"] == ["cubic"], x.detail["server"]
    uploaded = [x.detail["background"][1]["bytes"] for x in runs]
    assert sum(uploaded) > 0 and len(uploaded) == len(runs), uploaded
    bulk, video = prov["background"]["bg1"], prov["background"]["bg2"]
    assert bulk["listener_cc"] == "bbr" and bulk["conn_ccs"] == ["bbr"], bulk
    assert bulk["sender"] == "server" and video["sender"] == "client", (bulk, video)
    assert video["cc"] == "cubic" and video["protos"] == ["HTTP/3.0"], video
    assert video["client"]["mode"] == "chunks" and video["client"]["direction"] == "up", video
    assert video["client"]["requests"] >= 3, video
    logs = {p.name for p in (tmp_path / "res").rglob("bg*.jsonl")}
    assert {"bg1.client.jsonl", "bg1.server.jsonl", "bg2.client.jsonl"} <= logs, logs
    assert _left_running(shared_links.prefix_of(cfg)) == []


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_load_during_which_a_flow_died_is_invalid_and_ends_the_attempt(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """The background client killed (SIGKILL, a crash) just before the second measured h3
    load: that load is stored invalid with the flow named, the attempt fails saying so,
    no load is measured after it, and nothing is left running."""
    cfg = make_cell(
        condition=COND, page="5kb", arms=["h2", "h3"], runs=3, warmup=1, background="bulk:tcp:cubic"
    )

    def kill_flow(arm: str, rep: int, _servers: dict[str, Any]) -> None:
        if (arm, rep) == ("h3", 2):
            ns = LocalTestbed(shared_links.prefix_of(cfg)).ns("client")
            cp = subprocess.run(
                ["ip", "netns", "exec", ns, "pkill", "-KILL", "-f", "quicbed-bulk .*-flow bg1"]
            )
            assert cp.returncode == 0, "no background client to kill"

    r = shared_links.run_cell(cfg, tmp_path / "res", fault=kill_flow)
    assert r.status == "failed"
    want = "background flow bg1 (bulk tcp cubic) was not running over this load"
    assert want in (r.problem or "") and "the loads after it were not measured" in r.problem
    runs, prov = _stored(tmp_path / "res")
    last = max(runs, key=lambda x: x.seq)
    assert (last.arm, last.rep, last.valid) == ("h3", 2, False), last
    assert want in last.reason and "its client has exited" in last.reason, last.reason
    # every load before it valid, but for one a busy host or the link spoiled (stop 62's
    # make test: an earlier load spoiled, not the flow's doing)
    before = [x for x in runs if x.seq < last.seq]
    assert all(x.valid or spoiled_only(load_proof(x.detail)) for x in before), [
        (x.arm, x.rep, x.reason) for x in before if not x.valid
    ]
    assert json.dumps(prov["background"]["bg1"]["client"]) == "{}"  # it wrote no final record
    assert _left_running(shared_links.prefix_of(cfg)) == []
