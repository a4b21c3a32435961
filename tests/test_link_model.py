"""The link model: how a stated condition resolves into per-direction pipes."""

from __future__ import annotations

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import MAX_FRAME, MIN_QUEUE_FRAMES, JitterKind, make_condition, parse_queue


def test_rtt_splits_evenly_and_loss_is_end_to_end() -> None:
    c = make_condition(rate_mbit=50, rtt_ms=36, loss_pct=1)
    p = c.pipes()
    assert p["down"].delay_us == 18000 and p["up"].delay_us == 18000
    assert p["down"].loss == pytest.approx(0.005) and p["up"].loss == pytest.approx(0.005)
    assert p["down"].rate_bps == 50_000_000


def test_per_direction_values_override() -> None:
    c = make_condition(rate_mbit=10, delay_down_ms=30, delay_up_ms=6, loss_down_pct=1)
    p = c.pipes()
    assert (p["down"].delay_us, p["up"].delay_us) == (30000, 6000)
    assert (p["down"].loss, p["up"].loss) == (0.01, 0.0)
    assert c.rtt() == 36


def test_queue_defaults_to_two_bdp() -> None:
    c = make_condition(rate_mbit=100, rtt_ms=112)
    bdp = 100e6 * 0.112 / 8
    assert c.bdp_bytes() == int(bdp)
    assert c.pipes()["down"].queue_bytes == int(2 * bdp)  # 2.8 MB, as the study
    assert c.socket_buffer_bytes() >= 2 * bdp


def test_queue_has_a_floor_of_ten_frames() -> None:
    c = make_condition(rate_mbit=1, rtt_ms=1)
    assert c.pipes()["up"].queue_bytes == MIN_QUEUE_FRAMES * MAX_FRAME


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("2bdp", ("bdp", 2.0)),
        ("100pkts", ("packets", 100.0)),
        ("450kB", ("bytes", 450000.0)),
        ("1MiB", ("bytes", 1048576.0)),
        ("64p", ("packets", 64.0)),
    ],
)
def test_parse_queue(spec: str, expected: tuple[str, float]) -> None:
    assert parse_queue(spec) == expected


def test_packet_queue_resolves_to_packets() -> None:
    p = make_condition(rate_mbit=10, rtt_ms=36, queue="50pkts").pipes()["down"]
    assert (p.queue_bytes, p.queue_packets) == (None, 50)


def test_unlimited_rate_has_no_queue() -> None:
    p = make_condition(rtt_ms=10).pipes()["down"]
    assert p.rate_bps is None and p.queue_bytes is None and p.queue_packets is None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rate_mbit": 0}, "rate must be > 0 Mbit/s (got 0)"),
        ({"rate_mbit": -5}, "got -5"),
        ({"loss_pct": 100}, "loss must be in [0, 100) % (got 100)"),
        ({"loss_pct": -1}, "got -1"),
        ({"loss_down_pct": 150}, "loss_down must be in [0, 100) % (got 150)"),
        ({"rtt_ms": -1}, "rtt must be >= 0 ms (got -1)"),
        ({"delay_up_ms": -3}, "delay_up must be >= 0 ms (got -3)"),
        ({"rtt_ms": 10, "jitter_ms": 6, "jitter_kind": "smooth"}, "smooth jitter 6 ms is larger"),
        ({"rtt_ms": 10, "jitter_ms": 2}, "needs a jitter kind: reorder, smooth or step"),
        (
            {"rtt_ms": 112, "jitter_ms": 120, "jitter_kind": "step", "jitter_interval_ms": 200},
            "step jitter 120 ms (+/- 60 ms) is larger than the down delay 56 ms can absorb",
        ),
        (
            {"delay_down_ms": 60, "delay_up_ms": 20, "jitter_ms": 50, "jitter_kind": "step"},
            "larger than the up delay 20 ms can absorb",
        ),
        (
            {"rtt_ms": 112, "jitter_ms": 0.5, "jitter_kind": "step", "jitter_interval_ms": 0.5},
            "at most every 1 ms (got jitter interval 0.5 ms)",
        ),
        (
            {"rtt_ms": 112, "jitter_ms": 50, "jitter_kind": "step", "jitter_interval_ms": 40},
            "step jitter 50 ms needs a jitter interval of at least 50 ms (got 40 ms)",
        ),
        ({"rtt_ms": 112, "jitter_interval_ms": 0}, "jitter interval must be in (0, 10000] ms"),
        ({"rtt_ms": 112, "jitter_kind": "wobbly"}, "jitter_kind"),
        ({"queue": "lots"}, "cannot parse 'lots'"),
        ({"queue": "0pkts"}, "must be > 0"),
        ({"queue": "100B"}, "less than one"),
        ({"rtt_ms": 10, "delay_down_ms": 5}, "either rtt or per-direction"),
        ({"rate_mbit": 10, "bogus": 1}, "bogus"),
    ],
)
def test_bad_conditions_name_the_value(kwargs: dict, needle: str) -> None:
    with pytest.raises(QuicbedError) as exc:
        make_condition(**kwargs)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_reorder_jitter_may_exceed_delay_but_smooth_may_not() -> None:
    c = make_condition(rtt_ms=112, jitter_ms=50, jitter_kind=JitterKind.reorder)
    assert c.pipes()["down"].jitter_us == 50000
    make_condition(rtt_ms=112, jitter_ms=50, jitter_kind="smooth")  # 50 <= 56: fine


def test_step_jitter_is_the_whole_range() -> None:
    """The study's "50 ms jitter" at 112 ms: 56 +/- 25 ms each way, re-drawn every 100 ms
    by default; the emulator gets the whole range (it halves it itself)."""
    c = make_condition(rtt_ms=112, jitter_ms=50, jitter_kind="step")
    for p in c.pipes().values():
        assert (p.delay_us, p.jitter_us, p.jitter_interval_us) == (56000, 50000, 100000)
        assert p.jitter_kind == JitterKind.step
    assert "jitter 50 ms step (+/- 25 ms every 100 ms)" in c.label()
    # the limit is twice the delay, and the interval at least the range
    make_condition(rtt_ms=112, jitter_ms=112, jitter_kind="step", jitter_interval_ms=112)
    # with no jitter, no kind needs an interval it could refuse
    make_condition(rtt_ms=112, jitter_kind="step", jitter_interval_ms=0.5)


def test_label() -> None:
    c = make_condition(rate_mbit=50, rtt_ms=36, loss_pct=1)
    assert c.label() == "50 Mbit/s, 36 ms, loss 0.5/0.5 % down/up, queue 2bdp"


def test_step_receipt_expects_the_models_reordering() -> None:
    """The receipt's expectation for step jitter, against synthetic probe results: the
    model's share of overtaken packets passes; none, the per-packet kind's share, or a
    packet later than a half-step fails (the Go model's own test checks the share)."""
    from quicbed.link.receipt import _mean_delay, _reorder_checks, step_reordering

    c = make_condition(rate_mbit=10, rtt_ms=112, jitter_ms=50, jitter_kind="step")
    assert _mean_delay(56, 50, JitterKind.step) == pytest.approx(56 + 50 / 24)
    pps, n = 3500.0, 20000
    expected, low, high = step_reordering(c, n, pps)
    assert expected == pytest.approx(n * 50 / 600)  # 8.3 % of the packets
    assert 0.3 * expected < low < 0.7 * expected and 1.3 * expected < high < 1.7 * expected

    def verdicts(reordered: int, late: float) -> list[bool | None]:
        probe = {"received": n, "reordered": reordered, "late_max_ms": late}
        probe |= {"late_mean_ms": late / 2, "extent_max": 50}
        return [ch.passed for ch in _reorder_checks(c, "down", probe, pps)]

    assert verdicts(round(expected), 24.0) == [True, True]
    assert verdicts(0, 0.0) == [False, True]
    assert verdicts(n // 2, 24.0) == [False, True]  # per-packet jitter's share
    assert verdicts(round(expected), 45.0)[1] is False  # a whole step, not a half
    # the other kinds keep their rules
    reorder = make_condition(rtt_ms=112, jitter_ms=50, jitter_kind="reorder")
    none = make_condition(rtt_ms=112)
    probe = {"received": n, "reordered": 3, "late_max_ms": 1.0}
    assert [ch.passed for ch in _reorder_checks(reorder, "up", probe, pps)] == [True]
    assert [ch.passed for ch in _reorder_checks(none, "up", probe, pps)] == [False]


def test_udpprobe_lateness_counts_exactly_the_overtaken() -> None:
    from quicbed.link.udpprobe import lateness_ms

    ms = 1_000_000
    # 0 and 1 are overtaken by 2 (arrived at 5 ms); 3 and 4 in order
    arrivals = {0: 9 * ms, 1: 7 * ms, 2: 5 * ms, 3: 10 * ms, 4: 11 * ms}
    assert sorted(lateness_ms(arrivals)) == [2.0, 4.0]
    assert lateness_ms({i: i * ms for i in range(10)}) == []


def test_udpprobe_delay_is_the_kernels_arrival_not_the_receivers_wakeup(tmp_path) -> None:
    """A receiver stopped for 0.5 s while datagrams arrive (a busy host's late wake-up)
    still measures loopback's delay: each delay is taken from the kernel's receive time.
    Timed on the reader, the mean came out a quarter of a second."""
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    from quicbed.link.udpprobe import clock_offset_ns, send

    off = clock_offset_ns()
    assert abs(time.time_ns() + off - time.monotonic_ns()) < 5_000_000
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "probe.json"
    rx = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "quicbed.link.udpprobe",
            "recv",
            "--bind",
            f"127.0.0.1:{port}",
            "--count",
            "200",
            "--out",
            str(out),
            "--idle",
            "1",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while f":{port:04X}" not in Path("/proc/net/udp").read_text():
            assert time.monotonic() < deadline, "the receiver never bound"
            time.sleep(0.02)
        os.kill(rx.pid, signal.SIGSTOP)
        send(f"127.0.0.1:{port}", 200, 2000)
        time.sleep(0.5)
        os.kill(rx.pid, signal.SIGCONT)
        assert rx.wait(timeout=20) == 0
    finally:
        rx.kill()
    got = json.loads(out.read_text())
    assert got["received"] == 200
    assert got["max_ms"] < 50, got
