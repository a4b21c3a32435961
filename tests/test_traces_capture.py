"""Level ``full`` end to end: a real cell (namespaces, emulator, Apache, quic-go,
Chromium, tcpdump), then its captures opened decrypted by a real tshark with the arm's
TLS key log, HTTP/2 and HTTP/3 alike; the NetLog; the per-load size cap; and what
replication packages do with traces and key logs (keys only when asked; the secret
scan still refuses a key log anywhere else)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import scheduled
from tshark import fields, tshark

from quicbed.errors import QuicbedError
from quicbed.package.build import build_package
from quicbed.package.secretscan import KEYLOG_RULE, scan_tree
from quicbed.package.verify import verify
from quicbed.results.rows import RunRow
from quicbed.run.cell import CellResult
from quicbed.testbed.local import LocalTestbed
from quicbed.traces.capture import CaptureTracer, _cut, complete_netlog
from quicbed.traces.tracer import TraceContext, TraceSet

pytestmark = pytest.mark.root

QB = [sys.executable, "-m", "quicbed"]


@pytest.fixture
def full_cell(cell_1mb_full: dict[str, Any]) -> dict[str, Any]:
    """The suite's 1 MB cell at level full (conftest): measured once, read here."""
    return cell_1mb_full


def _load(cell: dict[str, Any], arm: str) -> tuple[RunRow, Path]:
    """A measured, valid load of ``arm`` and its trace folder."""
    r: CellResult = cell["result"]
    run = next(x for x in cell["runs"] if x.arm == arm and not x.warmup and x.valid)
    return run, cell["out"] / "traces" / r.cell_id / str(r.attempt) / f"{arm}-{run.rep:03d}"


@pytest.mark.browser
@pytest.mark.slow
def test_every_load_has_its_capture(full_cell: dict[str, Any]) -> None:
    out = full_cell["out"]
    # 3 runs and a warm-up per arm, and any load measured in place of a spoiled one
    assert len(scheduled(full_cell["runs"])) == 8
    for run in full_cell["runs"]:
        tr = run.detail["traces"]
        assert tr["level"] == "full"
        assert "capture" not in tr["missing"], tr["missing"]
        cap = out / tr["files"]["capture"]
        assert cap.name == "capture.pcap.gz" and cap.parent == out / tr["dir"]
        manifest = json.loads((cap.parent / "trace.json").read_text())
        assert manifest["files"]["capture"]["bytes"] == cap.stat().st_size
        assert not [n for n in tr["notes"] if "capture" in n], tr["notes"]
    stats = full_cell["capture"].stats
    assert len(stats) == len(full_cell["runs"]) and all(s.dropped == 0 for s in stats), stats
    for s in stats:
        print(
            f"{s.load}: {s.packets} packets, {s.raw_bytes} B raw, {s.gz_bytes} B gz, "
            f"start {s.start_s * 1000:.0f} ms, stop {s.stop_s * 1000:.0f} ms, "
            f"cpu {(s.cpu_s or 0) * 1000:.0f} ms"
        )


@pytest.mark.browser
@pytest.mark.slow
def test_h2_capture_opens_decrypted_with_the_key_log(full_cell: dict[str, Any]) -> None:
    _, folder = _load(full_cell, "h2")
    keys = folder.parent / "h2-keys.log"
    cap = folder / "capture.pcap.gz"
    frames = fields(cap, keys, "http2", "http2.type")
    types = {t for line in frames for t in line.split(",")}
    assert {"0", "1"} <= types, types  # DATA and HEADERS frames, decrypted
    assert fields(cap, None, "http2", "http2.type") == []  # without keys: nothing
    assert fields(cap, None, "tls", "tls.record.content_type")  # only records


@pytest.mark.browser
@pytest.mark.slow
def test_h3_capture_opens_decrypted_with_the_key_log(full_cell: dict[str, Any]) -> None:
    _, folder = _load(full_cell, "h3")
    keys = folder.parent / "h3-keys.log"
    cap = folder / "capture.pcap.gz"
    frames = fields(cap, keys, "http3", "http3.frame_type")
    types = {t for line in frames for t in line.split(",")}
    assert {"0", "1"} <= types, types  # DATA and HEADERS frames, decrypted
    assert fields(cap, None, "http3", "http3.frame_type") == []
    # without keys only the Initial packets open (their keys come from the connection ID)
    assert fields(cap, None, "quic.stream.stream_id", "quic.stream.stream_id") == []
    assert fields(cap, None, "quic", "quic.long.packet_type")


@pytest.mark.browser
@pytest.mark.slow
def test_netlog_of_each_arm_is_json_with_events(full_cell: dict[str, Any]) -> None:
    r: CellResult = full_cell["result"]
    base = full_cell["out"] / "traces" / r.cell_id / str(r.attempt)
    for arm in ("h2", "h3"):
        with gzip.open(base / f"{arm}-netlog.json.gz", "rt") as f:
            log = json.load(f)
        assert log["constants"] and len(log["events"]) > 100
        run, _ = _load(full_cell, arm)
        assert run.detail["traces"]["files"]["netlog"].endswith(f"{arm}-netlog.json.gz")
        assert run.detail["traces"]["files"]["keys"].endswith(f"{arm}-keys.log")


@pytest.mark.browser
@pytest.mark.slow
def test_an_unfinished_netlog_is_closed_after_its_last_whole_event(
    full_cell: dict[str, Any],
) -> None:
    """Chromium often exits before its network service closes the NetLog's JSON; the
    cell closes it. A file cut inside an event keeps every whole event before it."""
    r: CellResult = full_cell["result"]
    path = full_cell["out"] / "traces" / r.cell_id / str(r.attempt) / "h2-netlog.json.gz"
    whole = gzip.decompress(path.read_bytes())
    assert complete_netlog(whole) == (whole, False)  # a valid file is left as it is
    log = json.loads(whole)
    n = len(log["events"])
    # as Chromium writes it: constants, then one event per line, each with a comma
    head = b'{"constants":' + json.dumps(log["constants"]).encode() + b',\n"events": [\n'
    lines = b"".join(json.dumps(e, separators=(",", ":")).encode() + b",\n" for e in log["events"])
    for cut, keep in ((head + lines, n), (head + lines[:-10], n - 1)):
        fixed, closed = complete_netlog(cut)
        assert closed and len(json.loads(fixed)["events"]) == keep
    assert complete_netlog(b"not a netlog,\n") == (b"not a netlog,\n", False)


def test_a_capture_over_the_cap_is_cut_and_says_so(testbed: LocalTestbed, tmp_path: Path) -> None:
    """tcpdump stops at the cap's packet count; the load's notes say the capture is cut.
    Traffic: pings to a made-up neighbour, so they leave eth0 without a link behind it."""
    tb = testbed
    tb.exec(
        "client",
        [
            "ip",
            "neigh",
            "replace",
            tb.server_ip,
            "lladdr",
            "02:00:00:00:00:01",
            "dev",
            "eth0",
            "nud",
            "permanent",
        ],
    )
    tracer = CaptureTracer(cap_bytes=20 * (1514 + 16))
    ctx = TraceContext(
        level="full",
        testbed=tb,
        results=tmp_path,
        cell_id="cap",
        attempt=1,
        arms=("h2",),
        transports={"h2": "tcp"},
    )
    ts = TraceSet(ctx, [tracer])
    ts.start()
    try:
        lt = ts.begin("h2", 0)
        tb.exec(
            "client",
            ["ping", "-q", "-c", "60", "-i", "0.002", "-w", "1", tb.server_ip],
            check=False,
        )
        ts.end(lt)
        ts.finish()
    finally:
        ts.stop()
    assert any("capture cut at 20 packets" in n for n in lt.notes), lt.notes
    cap = tmp_path / lt.files["capture"]
    assert len(tshark("-r", str(cap)).splitlines()) == 20
    assert json.loads((cap.parent / "trace.json").read_text())["notes"] == lt.notes


@pytest.mark.browser
@pytest.mark.slow
def test_cut_keeps_whole_records(full_cell: dict[str, Any], tmp_path: Path) -> None:
    """The byte cap's fallback (a frame larger than the MTU) cuts between records, so the
    cut file is still a capture tshark reads."""
    _, folder = _load(full_cell, "h2")
    data = gzip.decompress((folder / "capture.pcap.gz").read_bytes())
    cut, n = _cut(data, 20_000)
    assert 0 < len(cut) <= 20_000 and n > 5
    (tmp_path / "cut.pcap").write_bytes(cut)
    assert len(tshark("-r", str(tmp_path / "cut.pcap")).splitlines()) == n


# --- packages ---------------------------------------------------------------------------
def _members(archive: Path) -> list[str]:
    with tarfile.open(archive) as t:
        return [m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile()]


def _manifest(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as t:
        f = t.extractfile(f"{archive.name[: -len('.tar.gz')]}/MANIFEST.json")
        assert f is not None
        return json.loads(f.read())


@pytest.mark.browser
@pytest.mark.slow
def test_package_traces_without_keys_then_with_keys(
    full_cell: dict[str, Any], tmp_path: Path
) -> None:
    out = full_cell["out"]
    plain = build_package(out, tmp_path / "plain.tar.gz", home=tmp_path, environ={})
    assert not [n for n in _members(plain.path) if n.startswith("results/traces")]
    left = _manifest(plain.path)["left_out"]
    assert {"path": "results/traces", "why": "not asked for (--traces)"} in left

    no_keys = build_package(out, tmp_path / "nokeys.tar.gz", traces=True, home=tmp_path, environ={})
    names = _members(no_keys.path)
    assert sum(n.endswith("/capture.pcap.gz") for n in names) == len(full_cell["runs"])
    assert sum(n.endswith("-netlog.json.gz") for n in names) == 2
    assert not [n for n in names if n.endswith("-keys.log")], names
    assert no_keys.counts["traces"] > 0 and no_keys.counts["keys"] == 0
    left = _manifest(no_keys.path)["left_out"]
    assert any(x["path"].endswith("-keys.log") and x["count"] == 2 for x in left), left

    with_keys = tmp_path / "keys.tar.gz"
    cp = subprocess.run(
        [*QB, "package", str(out), "--traces", "--keys", "-o", str(with_keys)],
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 0, cp.stderr
    assert "(2 TLS key logs)" in cp.stdout, cp.stdout
    names = _members(with_keys)
    assert sum(n.endswith("-keys.log") for n in names) == 2
    res = verify(with_keys)
    assert res.ok, res.problems


@pytest.mark.browser
@pytest.mark.slow
def test_keys_need_traces(full_cell: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(QuicbedError, match=r"--keys .* give --traces too"):
        build_package(full_cell["out"], tmp_path / "x.tar.gz", keys=True)
    assert not (tmp_path / "x.tar.gz").exists()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "traces", "keys"),
    [
        ("logs/{cell}/{att}/notes.txt", False, False),  # a key log among the logs
        ("logs/{cell}/{att}/saved.gz", True, True),  # gzipped, asked keys elsewhere
        ("traces/{cell}/{att}/h2-000/extra.txt", True, True),  # in a load folder
    ],
)
def test_a_key_log_that_was_not_asked_for_is_refused(
    full_cell: dict[str, Any], tmp_path: Path, where: str, traces: bool, keys: bool
) -> None:
    r: CellResult = full_cell["result"]
    src = tmp_path / "r"
    shutil.copytree(full_cell["out"], src)
    keylog = (src / "traces" / r.cell_id / str(r.attempt) / "h3-keys.log").read_bytes()
    stray = src / where.format(cell=r.cell_id, att=r.attempt)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(gzip.compress(keylog) if stray.suffix == ".gz" else keylog)
    said = re.escape(f"refusing to package: {stray}: {KEYLOG_RULE};")
    with pytest.raises(QuicbedError, match=said):
        build_package(
            src, tmp_path / "p.tar.gz", traces=traces, keys=keys, home=tmp_path, environ={}
        )
    assert not (tmp_path / "p.tar.gz").exists()


@pytest.mark.browser
@pytest.mark.slow
def test_the_scan_knows_a_key_log_by_name_and_by_content(
    full_cell: dict[str, Any], tmp_path: Path
) -> None:
    r: CellResult = full_cell["result"]
    keylog = full_cell["out"] / "traces" / r.cell_id / str(r.attempt) / "h2-keys.log"
    shutil.copyfile(keylog, tmp_path / "h2-keys.log")
    shutil.copyfile(keylog, tmp_path / "plain.txt")
    (tmp_path / "sslkeylog.txt").write_text("# nothing yet\n")
    name = "TLS key log file name"
    found = {(f.path, f.rule) for f in scan_tree(tmp_path)}
    assert found == {
        ("h2-keys.log", KEYLOG_RULE),
        ("h2-keys.log", name),
        ("plain.txt", KEYLOG_RULE),
        ("sslkeylog.txt", name),
    }
    excused = {"h2-keys.log": frozenset({KEYLOG_RULE, name})}
    found = {(f.path, f.rule) for f in scan_tree(tmp_path, allow=excused)}
    assert found == {("plain.txt", KEYLOG_RULE), ("sslkeylog.txt", name)}
