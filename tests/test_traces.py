"""Level ``light``: the TCP sender's state from tcp_probe (h2), quic-go's qlog (h3), and
the per-load facts derived from both. Parsers, the qlog validator and ``derive`` are
tested on constructed input shaped like the real thing; one real cell then checks them
on real kernel lines and real qlog files, and one real cell without tracefs checks that
a missing trace is recorded, never a failed load."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import SharedLinks, scheduled

from quicbed.model.link import make_condition
from quicbed.paths import sha256_file
from quicbed.results.store import Store
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.lifecycle import ROLES
from quicbed.testbed.ssh import Node, SshTestbed
from quicbed.traces import tcp
from quicbed.traces.capture import hosts_filter
from quicbed.traces.facts import KEYS, derive
from quicbed.traces.qlog import qlog_samples, validate_qlog, wall_clock_s
from quicbed.traces.tcp import TcpTracer, client_ports_in, parse_probe_lines, tracefs_problem
from quicbed.traces.tracer import TraceContext, read_samples

SERVER = "10.10.1.1"


# --- tcp_probe -------------------------------------------------------------------------
def _probe(
    ts: float,
    *,
    dport: int = 51000,
    nxt: int,
    una: int,
    cwnd: int = 10,
    ssthresh: int = 2147483647,
    wnd: int = 65535,
    srtt_us: int = 36100,
    data_len: int = 0,
    src: str = SERVER,
) -> str:
    """A line as the kernel prints it in the ``trace`` file (6.x format)."""
    return (
        f"          <idle>-0       [001] ..s2.  {ts:.6f}: tcp_probe: family=AF_INET "
        f"src={src}:443 dest=10.10.2.2:{dport} mark=0x0 data_len={data_len} "
        f"snd_nxt={nxt:#x} snd_una={una:#x} snd_cwnd={cwnd} ssthresh={ssthresh} "
        f"snd_wnd={wnd} srtt={srtt_us} rcv_wnd=65160 sock_cookie=2a "
        f"skbaddr=00000000aa skaddr=00000000bb"
    )


def _retx(ts: float, dport: int = 51000) -> str:
    return (
        f"  <idle>-0 [000] ..s2. {ts:.6f}: tcp_retransmit_skb: skbaddr=0000000 "
        f"skaddr=0000000 family=AF_INET sport=443 dport={dport} saddr={SERVER} "
        f"daddr=10.10.2.2 saddrv6=::ffff:10.10.1.1 daddrv6=::ffff:10.10.2.2 "
        f"state=TCP_ESTABLISHED err=0"
    )


def test_probe_lines_become_samples_with_wrap_units_and_handshake() -> None:
    isn = 0xFFFFF000  # the sequence numbers wrap during the transfer
    lines = [
        "# tracer: nop",
        _probe(100.000, nxt=isn, una=isn, data_len=1200),  # ClientHello, part 1
        _probe(100.001, nxt=isn, una=isn, data_len=600),  # part 2: nothing sent yet
        _probe(100.040, nxt=(isn + 5000) % 2**32, una=isn, data_len=80),  # Finished: handshake done
        _probe(
            100.080,
            nxt=(isn + 40000) % 2**32,
            una=(isn + 9000) % 2**32,
            cwnd=20,
            ssthresh=15,
            srtt_us=38000,
        ),
        _probe(100.081, nxt=1, una=1, src="10.10.9.9"),  # another host: dropped
        _retx(100.090),
    ]
    rows, kept = parse_probe_lines(lines, began_mono=99.990, server_ips=[SERVER], port=443)
    assert len(kept) == 5
    samples = [r for r in rows if r["event"] == "sample"]
    assert [r["t_ms"] for r in samples] == [10.0, 11.0, 50.0, 90.0]
    last = samples[-1]
    assert last["delivered_bytes"] == 9000 and last["in_flight_bytes"] == 31000
    assert last["cwnd_bytes"] == 20 * 1448 and last["ssthresh_bytes"] == 15 * 1448
    assert last["srtt_ms"] == 38.0 and last["snd_wnd_bytes"] == 65535
    assert samples[0]["ssthresh_bytes"] is None  # TCP_INFINITE_SSTHRESH: still slow start
    # cwnd below ssthresh is slow start, at or above it avoidance (20 >= 15 segments)
    assert [r["phase"] for r in samples] == ["slow_start"] * 3 + ["congestion_avoidance"]
    hs = [r for r in rows if r["event"] == "handshake_done"]
    assert [r["t_ms"] for r in hs] == [50.0]
    retx = [r for r in rows if r["event"] == "retransmit"]
    assert retx == [{"t_ms": 100.0, "event": "retransmit", "conn": "51000", "source": "tcp_probe"}]
    # only our namespace's client ports, when known
    rows, kept = parse_probe_lines(
        lines, began_mono=99.99, server_ips=[SERVER], port=443, client_ports={40000}
    )
    assert rows == [] and kept == []
    # a replayed page's origins, each at its own address: every listed address's flows
    # kept, each counted from its own first byte even where two share a client port
    origins = ["10.10.1.100", "10.10.1.101"]
    lines = [
        _probe(100.0, nxt=1000, una=1000, src=origins[0]),
        _probe(100.0, nxt=7000, una=7000, src=origins[1]),
        _probe(100.1, nxt=9000, una=5000, src=origins[0]),
        _probe(100.1, nxt=9000, una=8000, src=origins[1]),
        _probe(100.1, nxt=9000, una=8000, src=SERVER),  # not an origin of this page
    ]
    rows, kept = parse_probe_lines(lines, began_mono=99.99, server_ips=origins, port=443)
    assert len(kept) == 4
    assert [r["delivered_bytes"] for r in rows if r["event"] == "sample"] == [0, 0, 4000, 1000]
    want = ["(", "host", origins[0], "or", "host", origins[1], ")"]
    assert hosts_filter(tuple(origins)) == want
    # a connection of the previous load has no handshake in this one
    assert not [r for r in tcp.drop_handshakes_of(rows, {51000}) if r["event"] == "handshake_done"]


def test_client_ports_from_the_namespace_tcp_table() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: 0101010A:01BB 0202020A:C738 01 00000000:00000000 00:00000000 00000000     0\n"
        "   1: 00000000:01BB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
        "   2: 0101010A:9C40 0202020A:01BB 01 00000000:00000000 00:00000000 00000000     0\n"
    )
    assert client_ports_in([text], 443) == {0xC738, 0}


def test_tcp_tracer_says_why_it_cannot_run(tmp_path: Path) -> None:
    ssh = SshTestbed(nodes={r: Node(r, f"{r}.example") for r in ROLES})
    ctx = TraceContext(
        level="light",
        testbed=ssh,
        results=tmp_path,
        cell_id="c",
        attempt=1,
        arms=("h2", "h3"),
        transports={"h2": "tcp", "h3": "udp"},
    )
    assert TcpTracer().unavailable(ctx) == (
        "not on the ssh testbed yet (tcp_probe runs in the server's kernel)"
    )
    ctx.arms = ("h3",)
    assert TcpTracer().unavailable(ctx) is None  # no TCP arm: nothing to trace, no complaint
    # a real mount that fails: the mount point does not exist
    why = tracefs_problem(tmp_path / "no-such-dir")
    assert why and why.startswith(f"tracefs cannot be mounted at {tmp_path / 'no-such-dir'}")


# --- qlog ------------------------------------------------------------------------------
REF = "2025-03-01T10:00:00.123456789Z"


def _qlog(events: list[dict[str, Any]], *, header: dict[str, Any] | None = None) -> bytes:
    h = header or {
        "file_schema": "urn:ietf:params:qlog:file:sequential",
        "serialization_format": "application/qlog+json-seq",
        "title": "quic-go qlog",
        "code_version": "v0.65.0",
        "trace": {
            "event_schemas": ["urn:ietf:params:qlog:events:quic-14"],
            "vantage_point": {"type": "server"},
            "common_fields": {
                "group_id": "abcd",
                "reference_time": {
                    "clock_type": "monotonic",
                    "epoch": "unknown",
                    "wall_clock_time": REF,
                },
            },
        },
        "qlog_format": "JSON-SEQ",
        "qlog_version": "0.3",
    }
    return b"".join(b"\x1e" + json.dumps(r).encode() + b"\n" for r in [h, *events])


def _sent(t: float, pn: int, size: int, kind: str = "1RTT") -> dict[str, Any]:
    return {
        "time": t,
        "name": "transport:packet_sent",
        "data": {
            "header": {"packet_type": kind, "packet_number": pn},
            "raw": {"length": size, "payload_length": size - 20},
        },
    }


def _ack(t: float, ranges: list[list[int]], kind: str = "1RTT") -> dict[str, Any]:
    return {
        "time": t,
        "name": "transport:packet_received",
        "data": {
            "header": {"packet_type": kind, "packet_number": 1},
            "raw": {"length": 40},
            "frames": [{"frame_type": "ack", "acked_ranges": ranges}],
        },
    }


def _metrics(t: float, cwnd: int, inflight: int, srtt: float = 36.5) -> dict[str, Any]:
    return {
        "time": t,
        "name": "recovery:metrics_updated",
        "data": {
            "min_rtt": 36.1,
            "smoothed_rtt": srtt,
            "latest_rtt": 36.2,
            "rtt_variance": 1.0,
            "congestion_window": cwnd,
            "bytes_in_flight": inflight,
            "packets_in_flight": 2,
        },
    }


EVENTS = [
    {"time": 0.01, "name": "transport:connection_started", "data": {}},
    _sent(1.0, 0, 1252, "initial"),
    {"time": 37.0, "name": "quic:connection_state_updated", "data": {"new": "handshake_complete"}},
    {"time": 37.0, "name": "quic:connection_state_updated", "data": {"new": "handshake_confirmed"}},
    _sent(37.1, 0, 1400),
    _sent(37.2, 1, 1400),
    _sent(37.3, 3, 1400),
    _sent(37.4, 4, 1400),
    _ack(73.0, [[0, 1]]),  # packet 2 was skipped on purpose (quic-go does that)
    _metrics(73.0, 20000, 2800),
    {
        "time": 80.0,
        "name": "recovery:packet_lost",
        "data": {
            "header": {"packet_type": "1RTT", "packet_number": 3},
            "trigger": "time_threshold",
        },
    },
    _ack(110.0, [[0, 1], [4]]),
    _metrics(110.0, 10000, 0),
    {"time": 110.0, "name": "recovery:metrics_updated", "data": {"pto_count": 1}},
]


def test_qlog_validator_passes_a_good_file_and_names_what_is_broken() -> None:
    good = _qlog(EVENTS)
    assert validate_qlog(good) == []
    assert validate_qlog(b"") == ["empty file"]
    assert validate_qlog(good[1:])[0].startswith("not JSON-SEQ")
    truncated = validate_qlog(good[:-30])
    assert len(truncated) == 1 and "the last: truncated" in truncated[0], truncated
    hdr = json.loads(good.split(b"\x1e")[1])
    del hdr["qlog_format"]
    hdr["trace"]["common_fields"]["reference_time"]["wall_clock_time"] = "yesterday"
    p = validate_qlog(_qlog(EVENTS, header=hdr))
    assert "header: no qlog_format" in p
    assert any(x.startswith("header: reference_time: not an RFC 3339 time") for x in p), p
    back = validate_qlog(_qlog([EVENTS[5], EVENTS[1]]))
    assert back == ["record 2: time 1.0 goes backwards (after 37.2)"]
    assert validate_qlog(_qlog([{"time": 1, "name": "x", "data": []}])) == [
        "record 1: no 'category:event' name",
        "record 1: no data object",
    ]
    assert validate_qlog(_qlog([])) == ["no events"]


def test_qlog_events_become_samples_on_the_load_clock() -> None:
    ref = wall_clock_s(REF)
    assert ref % 1 == pytest.approx(0.123456789, abs=1e-6)  # nanoseconds kept
    rows, notes = qlog_samples(_qlog(EVENTS), began_wall=ref - 0.5, conn="abcd")
    assert notes == []
    by = {e: [r for r in rows if r["event"] == e] for e in ("sample", "lost", "handshake_done")}
    assert [r["t_ms"] for r in by["handshake_done"]] == [537.0]  # one, though two states
    s1, s2 = by["sample"]  # the pto_count update is no sample
    assert s1 == {
        "t_ms": 573.0,
        "event": "sample",
        "conn": "abcd",
        "cwnd_bytes": 20000,
        "in_flight_bytes": 2800,
        "delivered_bytes": 2800,
        "srtt_ms": 36.5,
        "rtt_sample_ms": 36.2,
        "phase": None,  # no congestion_state_updated yet
        "source": "qlog",
    }
    assert s2["delivered_bytes"] == 2800 + 1400  # pn 4; pn 3 was lost, never delivered
    # the sender's phase, from quic-go's congestion_state_updated, on the samples after it
    state = {
        "time": 100.0,
        "name": "recovery:congestion_state_updated",
        "data": {"new": "recovery"},
    }
    with_state, _ = qlog_samples(
        _qlog([*EVENTS[:-3], state, *EVENTS[-3:]]), began_wall=ref - 0.5, conn="abcd"
    )
    assert [r["phase"] for r in with_state if r["event"] == "sample"] == [None, "recovery"]
    assert by["lost"] == [
        {"t_ms": 580.0, "event": "lost", "conn": "abcd", "bytes": 1400, "source": "qlog"}
    ]
    # events after the next load began stay out of this one
    rows, notes = qlog_samples(_qlog(EVENTS), began_wall=ref, conn="abcd", until_wall=ref + 0.1)
    assert max(r["t_ms"] for r in rows) < 100 and notes == [
        "3 events after the next load began left out"
    ]


def test_spurious_losses_counted_where_the_server_logs_them() -> None:
    """quic-go's ``recovery:spurious_loss`` (a packet declared lost, acknowledged after
    all): a ``spurious`` row each, counted per load; zero where the server logs them and
    none came, unknown (None) where it does not log them."""
    ref = wall_clock_s(REF)
    spurious = {
        "time": 110.0,
        "name": "recovery:spurious_loss",
        "data": {
            "packet_number_space": "application_data",
            "packet_number": 3,
            "reordering_packets": 1,
            "reordering_time": 30.0,
        },
    }
    rows, _ = qlog_samples(_qlog([*EVENTS, spurious]), began_wall=ref - 0.5, conn="abcd")
    (sp,) = [r for r in rows if r["event"] == "spurious"]
    assert sp == {
        "t_ms": 610.0,
        "event": "spurious",
        "conn": "abcd",
        "rtt_sample_ms": 30.0,
        "source": "qlog",
    }
    assert derive(rows, arm="h3", ttfb_ms=1, plt_ms=2, logs_spurious=True)["spurious_losses"] == 1
    assert derive(rows, arm="h3", ttfb_ms=1, plt_ms=2)["spurious_losses"] is None
    plain, _ = qlog_samples(_qlog(EVENTS), began_wall=ref - 0.5, conn="abcd")
    assert derive(plain, arm="h3", ttfb_ms=1, plt_ms=2, logs_spurious=True)["spurious_losses"] == 0


def test_loss_thresholds_become_rows_and_the_time_threshold_follows_srtt() -> None:
    """quic-go's ``recovery:parameters_set``: a ``thresholds`` row each (the packet
    threshold 0 once switched off), and the window figure's time threshold is the factor
    in force times each sample's smoothed RTT."""
    from quicbed.report.windows import time_threshold_ms

    ref = wall_clock_s(REF)

    def params(t: float, pkt: object, factor: float) -> dict[str, Any]:
        data = {"reordering_threshold": pkt, "time_threshold": factor, "timer_granularity": 1}
        return {"time": t, "name": "quic:recovery_parameters_set", "data": data}

    events = [params(0.5, 3, 1.125), *EVENTS, params(120.0, "disabled", 1.25)]
    rows, notes = qlog_samples(_qlog(events), began_wall=ref, conn="abcd")
    assert notes == []
    th = [r for r in rows if r["event"] == "thresholds"]
    assert [(r["t_ms"], r["packet_threshold"], r["time_threshold"]) for r in th] == [
        (0.5, 3, 1.125),
        (120.0, 0, 1.25),
    ]
    timed = [{**r, "t_s": r["t_ms"] / 1000} for r in rows]
    got = time_threshold_ms(timed)
    samples = [r for r in timed if r["event"] == "sample" and r.get("srtt_ms")]
    assert got and len(got) == len(samples)
    for (t, ms), smp in zip(got, samples, strict=True):
        factor = 1.25 if t >= 0.12 else 1.125
        assert ms == pytest.approx(factor * smp["srtt_ms"])
    assert time_threshold_ms([{**r, "t_s": 0.0} for r in rows if r["event"] != "thresholds"]) == []


# --- facts -----------------------------------------------------------------------------
def _flow(
    n: int, *, cwnd: int = 30000, inflight: int = 29000, wnd: int | None = None
) -> list[dict[str, Any]]:
    """``n`` ACKs 10 ms apart, 3000 bytes delivered by each."""
    return [
        {
            "t_ms": 100 + i * 10.0,
            "event": "sample",
            "conn": "1",
            "cwnd_bytes": cwnd,
            "in_flight_bytes": inflight,
            "delivered_bytes": i * 3000,
            "srtt_ms": 36 + i % 3,
            "snd_wnd_bytes": wnd,
            "source": "tcp_probe",
        }
        for i in range(n)
    ]


def test_derive_says_no_samples_instead_of_numbers() -> None:
    f = derive([], arm="h3", ttfb_ms=80.0, plt_ms=300.0)
    assert set(f) == set(KEYS) and f["status"] == "no samples" and f["samples"] == 0
    assert f["ttfb_ms"] == 80.0 and f["plt_ms"] == 300.0
    assert all(
        f[k] is None for k in KEYS if k not in ("status", "samples", "ttfb_ms", "plt_ms", "notes")
    )


def test_derive_cwnd_limited_flow_with_a_loss() -> None:
    rows = [
        *_flow(11),
        {"t_ms": 90.0, "event": "handshake_done", "conn": "1"},
        {"t_ms": 125.0, "event": "retransmit", "conn": "1", "source": "tcp_probe"},
    ]
    f = derive(rows, arm="h2", ttfb_ms=144.0, plt_ms=400.0)
    assert f["status"] == "ok" and f["source"] == "tcp_probe" and f["samples"] == 11
    assert f["srtt_min_ms"] == 36 and f["srtt_max_ms"] == 38
    assert f["handshake_done_ms"] == 90.0 and f["handshake_rtts"] == 2.5
    assert f["ttfb_rtts"] == 4.0
    assert f["losses"] == f["retransmissions"] == 1 and f["lost_bytes"] is None
    assert f["first_loss_ms"] == 125.0
    assert f["cwnd_at_first_loss_bytes"] == 30000 and f["in_flight_at_first_loss_bytes"] == 29000
    assert f["delivered_bytes"] == 30000
    assert f["delivery_rate_mean_mbit"] == pytest.approx(30000 * 8 / 100 / 1000)  # 100 ms
    assert f["delivery_rate_peak_mbit"] == pytest.approx(2.4)  # 3000 B per 10 ms everywhere
    assert f["window_limit"] == "cwnd" and f["cwnd_limited_share"] == 1.0
    assert f["max_cwnd_bytes"] == 30000


def test_derive_rwnd_and_app_limited() -> None:
    f = derive(_flow(6, cwnd=90000, inflight=20000, wnd=21000), arm="h2", ttfb_ms=None, plt_ms=None)
    assert f["window_limit"] == "rwnd" and f["rwnd_limited_share"] == 1.0
    assert f["cwnd_limited_share"] == 0.0 and f["ttfb_rtts"] is None
    f = derive(_flow(6, cwnd=90000, inflight=5000, wnd=500000), arm="h2", ttfb_ms=None, plt_ms=None)
    assert f["window_limit"] == "app"
    lost = [
        {"t_ms": t, "event": "lost", "conn": "q", "bytes": b, "source": "qlog"}
        for t, b in ((120.0, 1400), (121.0, 1252))
    ]
    q = [dict(r, conn="q", source="qlog", snd_wnd_bytes=None) for r in _flow(5)]
    f = derive(q + lost, arm="h3", ttfb_ms=None, plt_ms=None)
    assert f["losses"] == 2 and f["lost_bytes"] == 2652 and f["retransmissions"] is None
    assert f["rwnd_limited_share"] is None and f["window_limit"] == "cwnd"
    assert "no handshake" in f["notes"][0]


# --- real cells --------------------------------------------------------------------------
def _gunzip(p: Path) -> bytes:
    return gzip.decompress(p.read_bytes())


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_light_cell_traces_both_arms(shared_links: SharedLinks, tmp_path: Path) -> None:
    """A real 1 MB cell at 10 Mbit/s, 36 ms (the suite's shared link): every load's traces
    are on disk as trace.json says, h2 has tcp_probe samples whose srtt is the emulated RTT, h3 a
    valid qlog with metrics, and every run has its facts."""
    rtt = 36.0
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=rtt), page="1mb", runs=3, warmup=1
    )
    out = tmp_path / "res"
    r = shared_links.run_cell(cfg, out, traces="light")
    assert r.status == "done", r.problem
    runs = scheduled(Store(out).runs(r.cell_id, r.attempt))
    assert len(runs) == 8
    report = []
    for run in runs:
        tr, facts = run.detail["traces"], run.detail["transport"]
        arm = run.arm
        assert tr["missing"] == {}, (arm, run.rep, tr)
        manifest = json.loads((out / tr["dir"] / "trace.json").read_text())
        assert set(manifest["files"]) == set(tr["files"])
        for name, rel in tr["files"].items():
            p = out / rel
            assert p.exists(), rel
            assert manifest["files"][name] == {
                "path": rel,
                "bytes": p.stat().st_size,
                "sha256": sha256_file(p),
            }
        samples = read_samples(out / tr["files"]["transport"])
        pts = [s for s in samples if s["event"] == "sample"]
        assert set(facts) == set(KEYS) and facts["status"] == "ok", facts
        # never below the base RTT; above it by at most what the 2 x BDP queue can add
        # (srtt is smoothed, and a 1 MB transfer fills the queue)
        assert rtt - 1 <= facts["srtt_min_ms"] <= 3 * rtt, facts
        # the page went through. The trace ends with the load: the ACKs of the last flight
        # (one one-way delay later at the server) may be outside it. Seen: 885-976 KB of
        # the ~1 MB page for TCP; why the share varies is not yet known (docs/traces.md)
        assert facts["delivered_bytes"] > 0.8 * 1_000_000, facts
        assert facts["max_cwnd_bytes"] >= 10 * 1200
        assert facts["handshake_done_ms"] is not None
        if arm == "h2":
            assert {s["source"] for s in samples} == {"tcp_probe"}
            assert "tcp_probe" in tr["files"]
            raw = _gunzip(out / tr["files"]["tcp_probe"]).decode()
            assert "tcp_probe: family=AF_INET src=10.10.1.1:443" in raw
        else:
            assert {s["source"] for s in samples} == {"qlog"}
            qlogs = [k for k in tr["files"] if k.startswith("qlog:")]
            assert qlogs, tr
            for k in qlogs:
                assert validate_qlog(_gunzip(out / tr["files"][k])) == [], k
            assert all(s["cwnd_bytes"] for s in pts)
            # srtt is unknown only before the connection's first RTT sample
            assert sum(1 for s in pts if s["srtt_ms"]) >= 0.9 * len(pts)
        sizes = sum(v["bytes"] for v in manifest["files"].values())
        report.append(
            (
                arm,
                run.rep,
                len(pts),
                facts["srtt_min_ms"],
                facts["handshake_rtts"],
                facts["window_limit"],
                sizes,
                tr["notes"],
            )
        )
    for line in report:
        print(line)
    # nothing left behind: the tracefs instance and the server's qlog folder are gone
    prefix = shared_links.prefix_of(cfg)
    assert not (tcp.TRACEFS / "instances" / f"quicbed-{prefix}").exists()
    assert not (Path("/run/quicbed") / prefix / "qlog" / f"{r.cell_id}-{r.attempt}").exists()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_without_tracefs_the_load_is_stored_and_the_trace_missing(
    shared_links: SharedLinks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tracefs where it cannot be mounted (a folder that does not exist: the mount
    really fails): the h2 loads are measured and stored, each says why it has no
    tcp trace, and the qlog of the h3 loads is unaffected."""
    assert os.geteuid() == 0
    monkeypatch.setattr(tcp, "TRACEFS", tmp_path / "no-tracefs")
    cfg = make_cell(
        condition=make_condition(rate_mbit=50, rtt_ms=20), page="100kb", runs=2, warmup=1
    )
    r = shared_links.run_cell(cfg, tmp_path / "res", traces="light")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    runs = {x.arm: x for x in Store(tmp_path / "res").runs(r.cell_id, r.attempt)}
    h2, h3 = runs["h2"].detail, runs["h3"].detail
    assert runs["h2"].valid == 1 and runs["h2"].plt_ms > 0
    assert h2["traces"]["missing"]["tcp"].startswith(
        f"tracefs cannot be mounted at {tmp_path / 'no-tracefs'}"
    )
    assert h2["transport"]["status"] == "no samples"
    assert any(k.startswith("qlog:") for k in h3["traces"]["files"])
    assert h3["transport"]["status"] == "ok"
