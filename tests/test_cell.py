"""One cell end to end with real components: namespaces, emulator, Apache, quic-go,
Chromium. Small run counts; the assertions are about correctness, not timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SharedLinks, scheduled, spoiled

from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.run.cell import run_cell
from quicbed.servers.webserver import WebServer
from quicbed.spec.cellconfig import make_cell

pytestmark = pytest.mark.root

QB = [sys.executable, "-m", "quicbed"]


def _ours_running() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    # binaries by their installed path: a `go build ./cmd/quicbed-h3server` is not ours
    keys = (
        "/bin/quicbed-h3server",
        "/bin/quicbed-quiche-server",
        "/bin/quicbed-linkem",
        "/etc/quicbed/apache",
        "client/load.js",
        "--enable-net-benchmarking",
    )
    return [line for line in out.splitlines() if any(k in line for k in keys)]


@pytest.fixture
def clean(prefix: str, shared_links: SharedLinks):
    before = set(_ours_running())
    yield
    shared = shared_links.pids()  # the suite's shared links run on
    left = {p for p in set(_ours_running()) - before if int(p.split()[0]) not in shared}
    assert not left, f"left running: {left}"


@pytest.mark.browser
@pytest.mark.slow
def test_cell_at_112ms_h3_0rtt_beats_h2(
    prefix: str, tmp_path: Path, clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=112), page="5kb", runs=3, warmup=1
    )
    monkeypatch.chdir(tmp_path)  # a relative results folder, as users type it
    r = run_cell(cfg, Path("res"), prefix=prefix, receipt_tcp_seconds=2)
    assert r.status == "done", r.problem
    assert r.receipt is not None and r.receipt.passed
    assert r.invalid == {}, r.invalid
    store = Store(tmp_path / "res")
    runs = scheduled(store.runs(r.cell_id, r.attempt))
    assert len(runs) == 8 and sum(x.warmup for x in runs) == 2
    for x in runs:
        assert x.protocols == [x.arm]
        assert x.objects == 2
        if x.arm == "h3" and not x.warmup:
            assert x.used_0rtt == 1  # the QUIC server's own log says so
        if x.arm == "h2" and not x.warmup:
            assert x.tls_resumed == 1
        if x.arm == "h2":  # Apache's log tells its connections apart (by client port)
            assert x.detail["server"]["connections"] == 1, x.detail["server"]
        assert (tmp_path / "res" / x.har_path).exists()
    h3 = r.verified["h3"]
    # a load the link or host spoiled is measured again at the cell's end: the
    # schedule's 3 loads, every one valid or replaced, every one over 0-RTT
    assert h3["measured"] - h3["replacements"] == 3 and h3["valid"] == 3, h3
    assert h3["spoiled"] == h3["replacements"] == len(r.spoiled.get("h3", [])), r.spoiled
    assert h3["used_0rtt"] == h3["tls_resumed"] == h3["measured"], h3
    assert h3["protocols"] == ["h3"] and h3["cc"] == ["cubic"], h3
    # the TCP arm's CC is the server kernel's word (ss -tin), not the config's
    assert r.verified["h2"]["cc"] == ["cubic"] and r.verified["h2"]["valid"] == 3
    h2 = r.verified["h2"]
    assert h2["tls_resumed"] == h2["measured"] and h2["protocols"] == ["h2"]
    c = r.comparisons["h2/h3"]
    assert c is not None and c.enough
    assert c.candidate.mean * 1.3 < c.reference.mean, (
        c.candidate.mean,
        c.reference.mean,
    )  # 0-RTT saves RTTs
    assert c.pct_diff > 30
    att = store.attempt(r.cell_id)
    assert att.provenance["git"]["sha"]
    assert "quic_go_version" in str(att.provenance["components"])
    assert att.receipt["passed"] is True


@pytest.mark.browser
@pytest.mark.slow
def test_quic_server_stopped_mid_cell_gives_invalid_runs(
    shared_links: SharedLinks, tmp_path: Path, clean: None
) -> None:
    cfg = make_cell(
        condition=make_condition(rate_mbit=50, rtt_ms=20),
        page="5kb",
        runs=4,
        warmup=1,
        load_timeout_s=10,
    )

    def stop_h3(arm: str, rep: int, servers: dict[str, WebServer]) -> None:
        if arm == "h3" and rep == 2:
            servers["h3"].stop()

    r = shared_links.run_cell(cfg, tmp_path / "res", fault=stop_h3)
    assert r.status == "done"
    bad = r.invalid.get("h3", [])
    assert len(bad) == 3 and all("not running" in b for b in bad), bad
    assert "h2" not in r.invalid
    c = r.comparisons["h2/h3"]
    assert not c.enough
    assert c.pct_diff is None and "too few valid runs in h3" in c.problem


@pytest.mark.slow
@pytest.mark.parallel  # refuses bad input: times nothing
def test_cli_cell_bad_input_writes_nothing(prefix: str, tmp_path: Path) -> None:
    for args, needle in [
        (["--page", "7kb"], "unknown page '7kb'"),
        (["--page", "5kb", "--runs", "1"], "runs must be >= 2"),
        (["--page", "5kb", "--mode", "2rtt"], "'2rtt'"),
        (["--page", "5kb", "--arms", "h2,spdy"], "unknown arm 'spdy'"),
        (["--page", "5kb", "--rate", "-1"], "rate must be > 0"),
        (["--page", "5kb", "--cc", "bbr"], "is not offered by quic-go"),
    ]:
        cp = subprocess.run(
            [*QB, "cell", "--out", str(tmp_path / "r"), "--prefix", prefix, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cp.returncode == 2, (args, cp.stdout, cp.stderr)
        assert needle in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr
        assert not (tmp_path / "r").exists()


@pytest.mark.browser
def test_cli_cell_into_a_sweep_of_other_software_is_refused(prefix: str, tmp_path: Path) -> None:
    """``quicbed cell --out`` into a sweep's folder whose runs were made with another
    Chromium: refused naming the versions (the software is read from the real testbed),
    nothing measured, the folder as it was."""
    import json

    from quicbed.results.folder import SWEEP_FILE

    out = tmp_path / "sweep"
    out.mkdir()
    # as a sweep file before digests recorded it: one version per component
    old = ("chromium", "apache", "quicbed-h3server", "quicbed-linkem", "quicbed")
    software = {**dict.fromkeys(old), "chromium": "Chromium 1.0"}
    held = {"format": 1, "digest": "d", "spec": {"name": "old"}, "software": software}
    (out / SWEEP_FILE).write_text(json.dumps(held))
    (out / "sweep.lock").touch()  # as a sweep leaves its folder
    before = sorted(p.name for p in out.iterdir())
    cp = subprocess.run(
        [*QB, "cell", "--out", str(out), "--prefix", prefix, "--page", "5kb", "--runs", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cp.returncode == 2, (cp.stdout, cp.stderr)
    assert "holds sweep 'old'" in cp.stderr and "chromium (Chromium 1.0 -> " in cp.stderr
    assert "--force" in cp.stderr
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.browser
@pytest.mark.slow
def test_1rtt_mode_uses_a_fresh_context_per_load(
    shared_links: SharedLinks, tmp_path: Path, clean: None
) -> None:
    """Each load in a context of its own. h2 as well: the context is disposed only when
    the next load starts, so the server's kernel can still be asked what the load's
    TCP connections ran (disposed at the end of the load, every h2 load of a 1-RTT
    cell was invalid: "the server's connections ran nothing, not cubic")."""
    cfg = make_cell(
        condition=make_condition(rate_mbit=50, rtt_ms=20),
        page="10kbx100",
        runs=2,
        warmup=0,
        mode="1rtt",
        arms=("h2", "h3"),
    )
    r = shared_links.run_cell(cfg, tmp_path / "res")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    runs = scheduled(Store(tmp_path / "res").runs(r.cell_id, r.attempt))
    assert [x.used_0rtt for x in runs if x.arm == "h3"] == [0, 0]
    assert [x.tls_resumed for x in runs if x.arm == "h2"] == [0, 0]
    assert all(x.objects == 101 and (x.valid or spoiled(x)) for x in runs)
    contexts = {x.detail["context"] for x in runs}
    assert len(contexts) == 4 and "default" not in contexts
