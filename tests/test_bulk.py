"""Bulk and compete cells (quicbed.run.bulk, quicbed.results.transfers): the numbers from made-up
flows, and real runs on the local testbed (short, at 10 Mbit/s: structure and sanity):
a sweep of a bulk and a compete cell on one link (tests/test_transfer_cells.py has the
configs, specs, report and package from made-up records)."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import reads_well

from quicbed.analysis.transfers import stored_transfer
from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.results.linkload import spoiled_only
from quicbed.results.store import Store
from quicbed.results.transfers import (
    BulkResult,
    CompeteResult,
    FlowResult,
    bytes_at,
    ideal_goodput_bps,
    jain,
    steady_window,
)
from quicbed.spec import bulkobjects
from quicbed.tcpinfo import ss_connections
from quicbed.testbed.local import LocalTestbed

SS = """\
ESTAB 0      0      10.10.1.1:443 10.10.1.2:54321
\t ts sack cubic wscale:7,7 rto:240 rtt:36.5/2 mss:1448 cwnd:120 bytes_sent:1000000 \
bytes_retrans:2896 bytes_acked:997104 data_segs_out:698 retrans:0/2
ESTAB 0      0      10.10.1.1:443 10.10.1.2:54400
\t ts sack bbr wscale:7,7 rto:240 rtt:40/2 mss:1448 cwnd:10 bytes_sent:5000 data_segs_out:4
"""


def test_ss_connections_per_peer_port() -> None:
    got = ss_connections(SS)
    assert got[54321]["cc"] == "cubic"
    assert got[54321]["retrans"] == 2 and got[54321]["bytes_retrans"] == 2896
    assert got[54321]["rtt_ms"] == 36.5
    # no retrans field yet: none retransmitted
    assert got[54400] == {
        "cc": "bbr",
        "retrans": 0,
        "bytes_retrans": 0,
        "bytes_sent": 5000,
        "data_segs_out": 4,
        "cwnd": 10,
        "rtt_ms": 40.0,
    }


def test_jain_and_ideal() -> None:
    assert jain([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([10.0, 0.0]) == pytest.approx(0.5)
    assert jain([]) is None
    assert jain([0.0, 0.0]) is None
    # 10 Mbit/s of Ethernet frames carry 1448/1514 of it as TCP payload
    assert ideal_goodput_bps(LinkCondition(rate_mbit=10, rtt_ms=36)) == pytest.approx(
        10e6 * 1448 / 1514
    )
    assert ideal_goodput_bps(LinkCondition(rtt_ms=36)) is None


def _flow(name: str, arm: str, rate_bps: float, start: float, dur: float) -> FlowResult:
    n = round(dur / 0.1)
    samples = [(round(0.1 * (i + 1), 3), int(rate_bps / 8 * 0.1 * (i + 1))) for i in range(n)]
    return FlowResult(
        flow=name,
        arm=arm,
        protocol="h2" if arm == "h2" else "h3",
        ok=True,
        bytes=samples[-1][1],
        start_offset_s=start,
        samples=samples,
    )


def test_steady_window_shares_and_timeline() -> None:
    a = _flow("h3-0", "h3", 6e6, 0.0, 10.0)
    b = _flow("h2-0", "h2", 3e6, 1.0, 10.0)
    lo, hi = steady_window([a, b], 10.0)
    assert lo == pytest.approx(3.0)  # the last start (1 s) + max(2 s, 20 % of 10 s)
    assert hi == pytest.approx(10.0)  # the first end
    assert bytes_at(a, 0.0) == 0 and bytes_at(b, 0.5) == 0
    assert bytes_at(a, 5.0) == pytest.approx(6e6 / 8 * 5)
    assert bytes_at(b, 6.0) == pytest.approx(3e6 / 8 * 5)
    tl = b.timeline()
    assert tl[0] == pytest.approx((1.1, 3e6))
    assert all(v == pytest.approx(3e6) for _, v in tl)


def test_bulk_objects_deterministic(tmp_path: Path) -> None:
    m = bulkobjects.generate_bulk(tmp_path, ["3MB", "1KB"])
    f = tmp_path / "bulk" / "3MB.bin"
    assert f.stat().st_size == 3_000_000
    data = f.read_bytes()
    assert m["objects"]["3MB"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert data[: 1 << 20] != data[1 << 20 : 2 << 20]  # no repeated block
    mtime = f.stat().st_mtime_ns
    again = bulkobjects.generate_bulk(tmp_path, ["3MB"])
    assert again == m and f.stat().st_mtime_ns == mtime  # not rewritten
    other = tmp_path / "other"
    bulkobjects.generate_bulk(other, ["3MB"])
    assert (other / "bulk" / "3MB.bin").read_bytes() == data
    assert json.loads((tmp_path / "bulk" / "manifest.json").read_text()) == m
    assert bulkobjects.object_path("100MB") == "bulk/100MB.bin"
    for bad in ("100", "1TB", "0MB", "5GB"):
        with pytest.raises(QuicbedError):
            bulkobjects.parse_size(bad)


# --- real runs on the local testbed ---------------------------------------------------
COND = LinkCondition(rate_mbit=10, rtt_ms=36)
QB = [sys.executable, "-m", "quicbed"]


SPEC = """
format: 1
name: transfers-tiny
receipt_tcp_seconds: 1
defaults: {runs: 2}
scenarios:
  goodput:
    kind: bulk
    rate: [10]
    rtt: [36]
    objects: [2MB]
    # the TCP arm with SACK off: every flow's handshake is checked for it
    arms: {h2: {tcp_sack: false}, h3: }
  fair:
    kind: compete
    rate: [10]
    rtt: [36]
    objects: [10MB]
    duration: [6]
    flows: ["h3x1,h2x1"]
"""


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.browser  # the report check renders its report
def test_a_sweep_of_a_bulk_and_a_compete_cell(prefix: str, tmp_path: Path) -> None:
    """One link condition, one receipt: the bulk cell measures on it fresh, the compete
    cell after an opening spot check; both stored, verified per flow, reported."""
    spec = tmp_path / "transfers.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "res"
    cp = subprocess.run(
        [*QB, "run", str(spec), "--out", str(out), "--prefix", prefix],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert not LocalTestbed(prefix).exists()
    store = Store.open_readonly(out)
    try:
        # each cell's latest attempt: a 1 s receipt spoiled by the busy machine is
        # retried once on a fresh link, as a new attempt (the sweep's rule)
        atts = store.latest_attempts()
        kinds = {cid: cfg["kind"] for cid, cfg in store.cell_configs().items()}
        assert sorted(kinds.values()) == ["bulk", "compete"] and len(atts) == 2
        assert all(a.status == "done" for a in atts.values()), atts
        spans = {cid: store.link_spans(cid, a.attempt) for cid, a in atts.items()}
        recs = {kinds[cid]: stored_transfer(store, cid, a.attempt) for cid, a in atts.items()}
    finally:
        store.close()
    # one receipt for both: the second cell opened with a spot check
    assert sorted(s["shared"] for (s,) in spans.values()) == [0, 1]
    assert all(s["passed"] and s["closing"] for (s,) in spans.values())
    bulk, comp = recs["bulk"], recs["compete"]
    assert isinstance(bulk, BulkResult) and isinstance(comp, CompeteResult)
    ideal = ideal_goodput_bps(COND)
    assert ideal is not None

    # the schedule's flows; a flow the busy machine spoiled is kept, replaced at the end
    planned = [x for x in bulk.runs if not x.replacement]
    assert [(x.arm, x.rep) for x in planned] == [("h2", 0), ("h3", 0), ("h3", 1), ("h2", 1)]
    for run in bulk.runs:
        f = run.flow
        assert run.link.get("late_tolerance_ms") == 15.0, run.link  # every flow proven
        if spoiled_only(run.link):
            continue
        assert f.ok, f.error
        assert f.bytes == 2_000_000
        assert f.http_proto == {"h2": "HTTP/2.0", "h3": "HTTP/3.0"}[run.arm]
        assert f.completion_s is not None and f.goodput_bps is not None
        # 2 MB at 10 Mbit/s: 1.7 s at the ideal; handshake and slow start add a little
        assert 1.6 < f.completion_s < 6
        assert 0.25 * ideal < f.goodput_bps <= 1.01 * ideal
        assert len(f.samples) >= 10
        assert all(b1 >= b0 for (_, b0), (_, b1) in zip(f.samples, f.samples[1:], strict=False))
        assert f.server.get("cc") == "cubic"
        assert f.evidence.get("cc") == ["cubic"]  # what the arm's server said it ran
        if run.arm == "h2":
            assert f.evidence["tcp_syn"], f.evidence  # the flow's SYN and SYN-ACK, checked
            assert f.retransmissions is not None and f.retransmissions >= 0
            assert "ss" in f.retrans_source
        else:
            assert f.quic_client is not None and f.quic_client["packets_received"] > 1000
        assert run.bottleneck is None or run.bottleneck["tx_bytes"] > 2_000_000
    assert set(bulk.summary) == {"h2", "h3"}
    for arm, s in bulk.summary.items():
        assert s.n == sum(1 for x in bulk.runs if x.arm == arm and x.flow.ok) >= 1
    assert set(bulk.comparisons) == {"h2/h3"}

    assert len([x for x in comp.runs if not x.replacement]) == 2
    for run in comp.runs:
        assert [f.flow for f in run.flows] == ["h3-0", "h2-0"]
        if run.spoiled:  # by the busy machine: kept, in no summary, replaced
            continue
        for f in run.flows:
            assert f.ok, f.error
            assert abs(f.start_offset_s) < 0.2  # started together
            assert f.completion_s == pytest.approx(6.0)
            assert len(f.samples) >= 50
        # together they fill the link: within the ideal, and most of it
        assert 0.6 * ideal < sum(run.steady_bps.values()) <= 1.05 * ideal
        assert sum(run.shares.values()) == pytest.approx(1.0)
        assert run.jain is not None and 0.5 <= run.jain <= 1.0
        assert run.steady_from_s == pytest.approx(2.0, abs=0.3) and run.steady_to_s > 5
        # the queue was sampled about every 100 ms and filled while two flows competed
        assert len(run.queue) >= 40, run.queue_note
        assert max(q.bytes for q in run.queue) > 0
        assert comp.queue_limit_bytes and max(q.bytes for q in run.queue) <= comp.queue_limit_bytes
    assert set(comp.summary) == {"h2", "h3"}
    assert comp.summary["h3"].n == sum(1 for x in comp.runs if not x.spoiled)
    assert comp.jain_mean is not None and "h2/h3" in comp.comparisons

    rep = subprocess.run([*QB, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    reads_well(out / "report", "bulk-and-compete")
    shown = json.loads((out / "report" / "figures.json").read_text())
    assert sorted(
        (f["shows"]["transfer"], f["shows"].get("rep")) for f in shown if f["shows"].get("transfer")
    ) == [("bulk", None)] + [("compete", x.rep) for x in comp.runs]
    with open(out / "report" / "transfers.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 4  # a row per cell and arm
