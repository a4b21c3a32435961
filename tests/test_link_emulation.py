"""Link emulation end to end: real namespaces, the real emulator, real ping and iperf3.

Bounds are generous on purpose (a shared 2-core machine): precise fidelity figures
belong to benchmarks/link_fidelity.py, not to tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from quicbed.link import probes
from quicbed.link.receipt import measure
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.shapers.netem import NetemShaper
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.testbed.local import LocalTestbed

pytestmark = pytest.mark.root

QB = [sys.executable, "-m", "quicbed"]


def _linkem_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-x", "quicbed-linkem"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QB, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_receipt_at_50mbit_36ms(testbed: LocalTestbed) -> None:
    cond = make_condition(rate_mbit=50, rtt_ms=36)
    with shaped_link(testbed, cond, "userspace") as link:
        r = measure(
            testbed, cond, link.shaper, link.tuning, tcp_seconds=3, tcp_omit=1, ping_count=100
        )
        pid = link.shaper.pid(testbed)
        assert pid is not None
    assert not os.path.exists(f"/proc/{pid}"), "emulator still running after the block"
    checks = {c.name: c for c in r.checks}
    assert 34 < checks["rtt"].measured < 40
    assert 16 < checks["owd_down"].measured < 21 and 16 < checks["owd_up"].measured < 21
    for d in ("down", "up"):
        assert checks[f"tcp_{d}"].measured > 0.8 * checks[f"tcp_{d}"].expected
        # not above the link: a link left unshaped would carry several times this. 5 %,
        # not 2 %: a 3 s window on this shared 2-core VM has measured 2.1 % over
        # (48.84 of 47.82 Mbit/s up, in a full test run on 2026-11-29)
        assert checks[f"tcp_{d}"].measured < 1.05 * checks[f"tcp_{d}"].expected
        assert 0.9 < checks[f"udp_rate_{d}"].measured / checks[f"udp_rate_{d}"].expected < 1.05
        assert checks[f"reorder_{d}"].measured == 0
        assert checks[f"loss_{d}"].measured == 0
    dirs = r.emulator["during_receipt"]
    assert dirs["down"]["queue_drops"] > 0  # the 1.2 x UDP stream overflowed the queue
    assert dirs["down"]["loss_drops"] == 0
    assert r.tuning["client"]["net.ipv4.tcp_congestion_control"] == "cubic"
    assert int(r.tuning["server"]["net.ipv4.tcp_rmem"].split()[2]) >= 2 * cond.bdp_bytes()
    # the host's CPU over the receipt: the emulator and the probes kept it busy
    host = r.host_cpu
    assert host is not None and host["ticks"] > 0, host
    assert 0 < host["busy_pct"] <= 100 and 0 <= host["steal_pct"] <= 100
    json.dumps(r.model_dump(mode="json"))  # a receipt is data


@pytest.mark.slow
def test_loss_is_random_and_per_direction(testbed: LocalTestbed) -> None:
    cond = make_condition(rate_mbit=20, rtt_ms=10, loss_down_pct=5, loss_up_pct=0)
    with shaped_link(testbed, cond, "userspace") as link:
        down = probes.udp_probe(testbed, "down", count=4000, pps=4000)
        up = probes.udp_probe(testbed, "up", count=4000, pps=4000)
        counters = link.shaper.counters(testbed)
    assert 0.03 < down["lost"] / down["sent"] < 0.07
    assert up["lost"] == 0
    assert counters["directions"]["down"]["loss_drops"] > 0
    assert counters["directions"]["up"]["loss_drops"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "reorders"), [("reorder", True), ("smooth", False), ("step", True)]
)
def test_jitter_kinds(testbed: LocalTestbed, kind: str, reorders: bool) -> None:
    cond = make_condition(
        rate_mbit=20, rtt_ms=40, jitter_ms=10, jitter_kind=kind, jitter_interval_ms=20
    )
    with shaped_link(testbed, cond, "userspace"):
        r = probes.udp_probe(testbed, "down", count=2000, pps=2000)
    assert (r["reordered"] > 0) is reorders
    assert r["lost"] == 0
    assert r["max_ms"] - r["min_ms"] > 5  # the delay really varied


@pytest.mark.slow
def test_step_jitter_passes_its_receipt_with_the_models_reordering(
    testbed: LocalTestbed,
) -> None:
    """The study's jitter (10 Mbit/s, 112 ms, 50 ms step) through the real emulator: the
    receipt passes, and in each direction the probe stream's overtaken packets are the
    model's share, range / (6 x interval) = 8.3 %, none later than a half-step."""
    cond = make_condition(rate_mbit=10, rtt_ms=112, jitter_ms=50, jitter_kind="step")
    with shaped_link(testbed, cond, "userspace") as link:
        r = measure(
            testbed, cond, link.shaper, link.tuning, tcp_seconds=1, tcp_omit=1, ping_count=200
        )
    checks = {c.name: c for c in r.checks}
    assert r.passed, [(c.name, c.measured, c.low, c.high) for c in r.failed_checks()]
    for d in ("down", "up"):
        reo, late = checks[f"reorder_{d}"], checks[f"reorder_late_{d}"]
        assert reo.passed and late.passed
        received = reo.detail["received"]
        # the model's expectation, and well away from none and from per-packet jitter
        assert reo.expected == pytest.approx(received * 50 / 600)
        assert 0.5 * reo.expected < reo.measured < 1.5 * reo.expected
        assert 5 < late.measured <= 27.5  # some drops near a half-step, none beyond
        owd = checks[f"owd_{d}"]
        assert owd.passed and owd.expected == pytest.approx(56 + 50 / 24, abs=0.2)
    assert checks["rtt"].passed
    emulated = r.emulator["counters_after"]["directions"]
    assert emulated["down"]["reordered"] > 0 and emulated["up"]["reordered"] > 0


@pytest.mark.slow
def test_netem_here_or_not(testbed: LocalTestbed) -> None:
    """On this CI kernel netem is missing and the error says so; elsewhere it shapes."""
    reason = NetemShaper().unavailable(testbed)
    cp = _cli(
        "link",
        "check",
        "--rate",
        "10",
        "--rtt",
        "20",
        "--shaper",
        "netem",
        "--prefix",
        testbed.prefix + "n",
        "--tcp-seconds",
        "1",
    )
    if reason:
        assert cp.returncode == 2
        assert "netem" in cp.stderr and cp.stderr.count("\n") == 1
    else:
        assert cp.returncode in (0, 1), cp.stderr


@pytest.mark.slow
def test_netem_probes_of_two_testbeds_on_one_kernel_do_not_collide(testbed: LocalTestbed) -> None:
    """Two ssh labs on one machine share the prefix ``ssh``: their netem probes run at
    once at a sweep's start, and each must get its own answer (CI lost a healthy
    testbed to "Cannot open network namespace" when they shared a throwaway name)."""
    twin = LocalTestbed(testbed.prefix)
    expected = NetemShaper().unavailable(testbed)
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(
            pool.map(lambda tb: [NetemShaper().unavailable(tb) for _ in range(15)], (testbed, twin))
        )
    assert {a for batch in answers for a in batch} == {expected}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{testbed.prefix}-probe" not in netns


@pytest.mark.parallel  # refused before anything is made: times nothing
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "0"], "rate must be > 0"),
        (["--rate", "fast"], "rate: not a number"),
        (["--loss", "100"], "loss must be in [0, 100)"),
        (["--rtt", "-4"], "rtt must be >= 0"),
        (["--rtt", "10", "--jitter", "8", "--jitter-kind", "smooth"], "smooth jitter 8 ms"),
        (["--jitter-kind", "wobbly"], "jitter kind: unknown 'wobbly'"),
        (
            ["--rtt", "36", "--jitter", "50", "--jitter-kind", "step"],
            "step jitter 50 ms (+/- 25 ms) is larger than the down delay 18 ms can absorb",
        ),
        (
            ["--rtt", "112", "--jitter", "50", "--jitter-kind", "step", "--jitter-interval", "40"],
            "step jitter 50 ms needs a jitter interval of at least 50 ms (got 40 ms)",
        ),
        (
            ["--rtt", "112", "--jitter", "1", "--jitter-kind", "step", "--jitter-interval", "0.5"],
            "step jitter is re-drawn at most every 1 ms (got jitter interval 0.5 ms)",
        ),
        (["--rtt", "112", "--jitter-interval", "nan"], "jitter interval must be in"),
        (["--shaper", "tc"], "unknown shaper 'tc'"),
        (["--queue", "2 buckets"], "queue: cannot parse"),
        (["--offloads", "gso=on"], "offloads gso=on with shaper auto: gso on needs shaper none"),
        (["--shaper", "none", "--offloads", "lro=on"], "offloads: unknown offload 'lro'"),
    ],
)
def test_bad_input_is_one_line_and_makes_nothing(prefix: str, args: list[str], needle: str) -> None:
    cp = _cli("link", "check", "--prefix", prefix, *args)
    assert cp.returncode == 2, cp.stdout
    assert needle in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr
    assert LocalTestbed(prefix).leftovers() == []


@pytest.mark.slow
def test_link_check_sets_the_offloads_it_is_given_and_puts_them_back(prefix: str) -> None:
    """``link check --shaper none --offloads``: the receipt is of the link with those
    offloads, read back on every interface; afterwards nothing is left."""
    args = ["--prefix", prefix, "--shaper", "none", "--offloads", "gso=on", "--tcp-seconds", "1"]
    cp = _cli("link", "check", *args, "--json")
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    r = json.loads(cp.stdout)
    assert r["tuning"]["offloads_set"] == {"gso": "on"}
    seen = r["tuning"]["offloads"]
    assert len(seen) == 4 and all(
        f["generic-segmentation-offload"] == "on" and f["generic-receive-offload"] == "off"
        for f in seen.values()
    ), seen
    assert LocalTestbed(prefix).leftovers() == []


def _wait_for_emulator(prefix: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if UserspaceShaper().pid(LocalTestbed(prefix)) is not None:
            return
        time.sleep(0.1)
    pytest.fail("the emulator never started")


@pytest.mark.slow
def test_ctrl_c_during_link_check_tears_everything_down(prefix: str) -> None:
    before = set(_linkem_pids())
    p = subprocess.Popen(
        [*QB, "link", "check", "--rate", "10", "--rtt", "20", "--prefix", prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_emulator(prefix)
    time.sleep(1.0)  # inside the measurements
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert LocalTestbed(prefix).leftovers() == []
    assert set(_linkem_pids()) <= before


@pytest.mark.slow
def test_kill_9_leaves_nothing_running_and_down_cleans_up(prefix: str) -> None:
    before = set(_linkem_pids())
    p = subprocess.Popen(
        [*QB, "link", "check", "--rate", "10", "--rtt", "20", "--prefix", prefix],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for_emulator(prefix)
    p.kill()
    p.wait(timeout=10)
    deadline = time.monotonic() + 10  # PR_SET_PDEATHSIG stops the emulator and probes
    while set(_linkem_pids()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(_linkem_pids()) <= before
    cp = _cli("testbed", "down", "--prefix", prefix)
    assert cp.returncode == 0
    assert LocalTestbed(prefix).leftovers() == []
