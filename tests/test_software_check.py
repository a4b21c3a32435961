"""The software check covers what ran, and one rule says what a set-up is.

Issue 25, items 3 and 4. A cell's runs pool only when they were measured with the same
builds of what the cell runs: quicbed, the link emulator, the cell's browser and every
arm's stack, each by its version and the SHA-256 of its program (quicbed.results.folder,
quicbed.results.provenance). The report counts set-ups by quicbed.results.provenance.setup_identity:
builds, kernel, hardware, sysctls, offloads and shaper; never PIDs, times or paths.

No testbed and no measurement: the software is this machine's, probed for real (a
program that is not built here is "not installed" on both sides, which compares equal);
a rebuild is a digest edited where the first run recorded it (sweep.json, the
attempt's provenance in the store), or a file rewritten where the probe reads it.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.report.build import build, provenance_groups, setup_differences
from quicbed.results import provenance
from quicbed.results.folder import (
    BASE_SOFTWARE,
    check_software,
    checked_software,
    read_sweep,
    software_changes,
    used_software,
    write_sweep,
)
from quicbed.results.store import Store
from quicbed.run import sweep
from quicbed.spec.sweepspec import SweepSpec, plan

QUICHE = "quicbed-quiche-server"
#: a build no machine has: the digest the first run "recorded"
OLD = "0" * 64
#: an h2 arm beside quiche's (quic-go is not in it), two cells
SPEC = SweepSpec(
    name="stacks",
    defaults={"runs": 5, "warmup": 0, "arms": {"h2": {}, "h3-q": {"stack": "quiche"}}},
    scenarios={"base": {"rate": [10], "rtt": [36], "pages": ["5kb", "10kbx100"]}},
)


#: the probe, before a test's ``probed`` replaces it
PROBE = provenance.software


@functools.cache
def _this_machine() -> dict[str, Any]:
    """This machine's software, as provenance.software probes it (once: about a second)."""
    return PROBE()


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> None:
    """provenance.software answers what it answered for this machine the first time: the
    runner's check and ``collect`` run as they do, without probing again each time (the
    probe itself is test_the_probe_reads_the_file_the_testbed_runs's)."""
    monkeypatch.setattr(provenance, "software", lambda tb=None: copy.deepcopy(_this_machine()))


def _started(out: Path) -> str:
    """A sweep folder as its first run leaves it: sweep.json with this machine's
    software, and the first cell's attempt with this machine's provenance (as
    ``run_cell`` records it). Returns that cell's ID."""
    sweep.prepare_folder(out, SPEC, resume=False, force=False)
    cfg = plan(SPEC)[0].config
    store = Store(out, create=True)
    try:
        store.add_cell(cfg.cell_id(), cfg.model_dump(mode="json"))
        store.new_attempt(cfg.cell_id(), provenance.collect())
    finally:
        store.close()
    return cfg.cell_id()


def _recorded_another(out: Path, cell_id: str, name: str, build: dict[str, Any]) -> None:
    """The first run had ``build`` of component ``name``: its record says so, in the
    sweep file and in the attempt's provenance (the data a rebuild changes)."""
    held = read_sweep(out)
    held["software"][name] = build
    write_sweep(out, held)
    store = Store(out)
    try:
        software = store.attempt(cell_id, 1).provenance["software"]
        store.add_provenance(cell_id, 1, "software", {**software, name: build})
    finally:
        store.close()


def test_a_rebuilt_quiche_server_refuses_the_resume_naming_it(tmp_path: Path, probed: None) -> None:
    """The quiche server's digest differs from the one the sweep's first run recorded:
    ``run --resume`` is refused naming that component and the two digests, and nothing
    else (every other component is the same build)."""
    out = tmp_path / "sweep"
    cid = _started(out)
    _recorded_another(out, cid, QUICHE, {"path": "/old/build/bin", "sha256": OLD})
    with pytest.raises(QuicbedError) as exc:
        sweep.prepare_folder(out, SPEC, resume=True, force=False)
    msg = str(exc.value)
    now = checked_software(provenance.software())
    assert msg.startswith("software changed since this sweep started (quicbed-quiche-server (")
    assert "(sha256 000000000000 -> " in msg
    assert msg.count(" -> ") == 1 and "--force" in msg
    # a cell measured into it again is refused too, by the sweep's record and, where
    # that agrees (a sweep file written again), by the cell's latest attempt
    cfg = plan(SPEC)[0].config
    with pytest.raises(QuicbedError, match=rf"holds sweep 'stacks', .* \({QUICHE} \("):
        sweep.run_cell_into(cfg, out, testbed=None)  # type: ignore[arg-type]
    held = read_sweep(out)
    write_sweep(out, {**held, "software": {**held["software"], QUICHE: now[QUICHE]}})
    with pytest.raises(QuicbedError, match=rf"attempt 1 in .* \({QUICHE} \("):
        sweep.run_cell_into(cfg, out, testbed=None)  # type: ignore[arg-type]


@pytest.mark.root
def test_a_resume_that_measures_nothing_is_not_refused(
    tmp_path: Path, probed: None, prefix: str
) -> None:
    """Every cell of the sweep is done and a component was rebuilt since: ``run
    --resume`` keeps them all, puts no run beside them, so it is not refused (as ``make
    demo`` on a finished results/demo after a set-up change was); the testbed is never
    set up. With one cell left to measure, the same resume is refused naming the build."""
    from quicbed.testbed.local import LocalTestbed

    out = tmp_path / "sweep"
    cid = _started(out)
    _recorded_another(out, cid, QUICHE, {"path": "/old/build/bin", "sha256": OLD})
    store = Store(out)
    try:
        for pc in plan(SPEC):
            other = pc.config.cell_id()
            if other != cid:
                store.add_cell(other, pc.config.model_dump(mode="json"))
                store.new_attempt(other, provenance.collect())
        store.finish_attempt(cid, 1, "done")
    finally:
        store.close()
    # one cell still without a finished attempt: measuring it would mix builds
    with pytest.raises(
        QuicbedError, match=rf"software changed since this sweep started \({QUICHE}"
    ):
        sweep.run_sweep(SPEC, out, testbed=LocalTestbed(prefix), resume=True)
    store = Store(out)
    try:
        for pc in plan(SPEC):
            store.finish_attempt(pc.config.cell_id(), 1, "done")
    finally:
        store.close()
    kept: list[str] = []
    outcome = sweep.run_sweep(
        SPEC,
        out,
        testbed=LocalTestbed(prefix),
        resume=True,
        on_cell=lambda i, n, pc, what: kept.append(what),
    )
    assert (outcome.skipped, outcome.done, outcome.failed, outcome.results) == (2, 0, 0, [])
    assert kept == ["kept (done)", "kept (done)"]
    assert read_sweep(out)["software"][QUICHE]["sha256"] == OLD  # the record as it was
    assert not (Path("/run/netns") / f"{prefix}-server").exists()  # never set up


def test_forced_both_builds_are_recorded_and_the_report_counts_two_set_ups(
    tmp_path: Path, probed: None
) -> None:
    """``--force`` goes on: the folder keeps the first run's record, the new attempt
    records the build that runs now, and the report sees two set-ups that differ in
    that component only."""
    out = tmp_path / "sweep"
    cid = _started(out)
    _recorded_another(out, cid, QUICHE, {"path": "/old/build/bin", "sha256": OLD})
    sweep.prepare_folder(out, SPEC, resume=True, force=True)
    store = Store(out)
    try:
        store.new_attempt(cid, provenance.collect())  # the forced run's attempt
        provs = {(cid, a.attempt): a.provenance for a in store.attempts(cid)}
    finally:
        store.close()
    now = provenance.software()[QUICHE]
    builds = [p["software"][QUICHE] for p in provs.values()]
    assert builds == [{"path": "/old/build/bin", "sha256": OLD}, now]
    assert read_sweep(out)["software"][QUICHE] == {"path": "/old/build/bin", "sha256": OLD}
    groups = provenance_groups(provs)
    assert [g["attempts"] for g in groups] == [[f"{cid}#1"], [f"{cid}#2"]]
    assert setup_differences(groups) == [f"software {QUICHE}"]


def test_a_component_the_sweep_does_not_run_is_not_checked(tmp_path: Path, probed: None) -> None:
    """Another build of the gQUIC server, of quic-go's server or of Chromium 72 (the
    sweep runs none of them) resumes; another Apache (its h2 arm's) does not."""
    out = tmp_path / "sweep"
    cid = _started(out)
    for name in ("quicbed-gquic-server", "quicbed-h3server", "chromium72"):
        _recorded_another(out, cid, name, {"sha256": OLD})
    sweep.prepare_folder(out, SPEC, resume=True, force=False)
    _recorded_another(out, cid, "apache", {"version": "Apache/1.3.0"})
    with pytest.raises(QuicbedError, match=r"\(apache \(Apache/1\.3\.0 -> "):
        sweep.prepare_folder(out, SPEC, resume=True, force=False)


def test_a_folder_recorded_before_digests_resumes_and_its_versions_are_still_checked(
    tmp_path: Path, probed: None
) -> None:
    """A sweep file of an earlier quicbed holds the old set, as it held it: a version
    string per program, a Go program's module versions alone. What it recorded is
    compared (the same versions resume), what it did not record (the digests, the
    quiche server) cannot be, so it does not refuse; a version that moved still does."""
    out = tmp_path / "sweep"
    sweep.prepare_folder(out, SPEC, resume=False, force=False)
    now = provenance.software()
    legacy = {
        "chromium": (now["chromium"] or {}).get("version"),
        "apache": (now["apache"] or {}).get("version"),
        "quicbed-h3server": (now["quicbed-h3server"] or {}).get("deps"),
        "quicbed-linkem": (now["quicbed-linkem"] or {}).get("deps"),
        "quicbed": now["quicbed"],
    }
    held = read_sweep(out)
    write_sweep(out, {**held, "software": legacy})
    sweep.prepare_folder(out, SPEC, resume=True, force=False)
    write_sweep(out, {**held, "software": {**legacy, "chromium": "Chromium 1.0"}})
    with pytest.raises(QuicbedError, match=r"\(chromium \(Chromium 1\.0 -> "):
        sweep.prepare_folder(out, SPEC, resume=True, force=False)


def test_the_probe_reads_the_file_the_testbed_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest is the file's, where the local testbed runs it from (QUICBED_BIN_DIR,
    as quicbed.paths.bin_path): a rebuild between two runs is a new digest, and the
    resume is refused."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    program = bindir / QUICHE
    program.write_bytes(b"\x7fELF quiche, first build")
    monkeypatch.setenv("QUICBED_BIN_DIR", str(bindir))
    out = tmp_path / "sweep"
    sweep.prepare_folder(out, SPEC, resume=False, force=False)
    first = hashlib.sha256(program.read_bytes()).hexdigest()
    assert read_sweep(out)["software"][QUICHE] == {"sha256": first}
    program.write_bytes(b"\x7fELF quiche, rebuilt")
    with pytest.raises(QuicbedError, match=rf"{QUICHE} \(sha256 {first[:12]} -> "):
        sweep.prepare_folder(out, SPEC, resume=True, force=False)


def test_what_a_cell_uses_is_its_stacks_and_its_browser() -> None:
    """The base, then the cell's client (the browser its stacks need; the transfer
    client for transfers), then each arm's stack by its program."""
    cells = [pc.config for pc in plan(SPEC)]
    assert used_software(cells) == (*BASE_SOFTWARE, "chromium", "apache", QUICHE)
    assert BASE_SOFTWARE == ("quicbed", "quicbed-linkem")
    gquic = SweepSpec(
        name="g",
        defaults={"runs": 5, "warmup": 0, "arms": {"h2": {}, "gq": {"stack": "gquic"}}},
        scenarios={"base": {"rate": [10], "rtt": [36], "pages": ["5kb"]}},
    )
    assert used_software(pc.config for pc in plan(gquic)) == (
        *BASE_SOFTWARE,
        "chromium72",
        "apache",
        "quicbed-gquic-server",
    )


def test_the_probes_belong_to_the_stacks_and_name_what_the_runners_run() -> None:
    """Every stack and browser is recorded under its own name; the constants the check
    names are the ones the runner uses (the link emulator, the transfer client)."""
    from quicbed.client import browsers
    from quicbed.run.bulk import CLIENT
    from quicbed.servers import stacks
    from quicbed.shapers.userspace import UserspaceShaper

    names = [s.software_name for s in stacks().values()]
    assert None not in names and len(set(names)) == len(names)
    assert provenance.BULK_CLIENT == CLIENT and UserspaceShaper.binary == provenance.LINK_EMULATOR
    sw = provenance.software()
    assert set(sw) == {"quicbed", "python", "iperf3", "node", "quicbed-linkem", CLIENT}.union(
        browsers(), names
    )
    apache = sw["apache"]
    if apache is not None:  # Apache by its version and every file that serves a load
        assert apache["version"].startswith("Apache/2.")
        assert {"httpd.conf", "mod_http2.so", "mod_ssl.so"} <= set(apache["files"])


def test_software_changes_compare_only_what_was_recorded() -> None:
    """The rule, on records: a component the record lacks is not compared; of one it
    holds, the fields both hold; one that is gone now has changed; the rest of a cell's
    folder (components it does not use) is never read."""
    now = {
        "chromium": {"version": "Chromium 156"},
        QUICHE: {"path": "/b/" + QUICHE, "sha256": "a" * 64},
        "quicbed-h3server": {"path": "/b/h3", "deps": {"quic-go": "v0.65.0"}, "sha256": "b" * 64},
    }
    uses = ("chromium", QUICHE, "quicbed-h3server")
    assert software_changes({}, now, uses) == {}
    old = {"chromium": "Chromium 156", "quicbed-h3server": {"quic-go": "v0.65.0", "x": "v1"}}
    assert software_changes(old, now, uses) == {
        "quicbed-h3server": ({"deps": {"x": "v1"}}, {"deps": {"x": None}})
    }
    gone = {QUICHE: {"sha256": "a" * 64}}
    assert software_changes(gone, {}, uses) == {QUICHE: ({"sha256": "a" * 64}, None)}
    with pytest.raises(QuicbedError, match=rf"\({QUICHE} \(sha256 aaaaaaaaaaaa -> not installed\)"):
        check_software(gone, {}, force=False, what="x", uses=uses)
    check_software(gone, {}, force=True, what="x", uses=uses)
    assert software_changes(gone, {}, ("chromium",)) == {}
    # a checked record read again is itself (a sweep file keeps checked_software)
    assert checked_software(checked_software(now)) == checked_software(now)
    assert "python" not in checked_software({"python": "3.11", **now})


# --- item 4: one set-up ------------------------------------------------------------------
def _attempt_record(pid: int, when: str, where: str) -> dict[str, Any]:
    """An attempt's provenance as quicbed records one on an ssh testbed, with what
    differs from one attempt to the next of one set-up: the time, the command, PIDs,
    start times, the paths of its logs and qlog files, the testbed's addresses."""
    software = _this_machine()
    nodes = {
        r: {
            "host": f"{r}.{where}.emulab.net",
            "port": 22,
            "user": "u" + where,
            "exp_ip": "10.1.1.2",
            "repo_dir": f"/local/{where}/repository",
            "workdir": f"/tmp/{where}",
            "sudo": True,
            "hardware_type": "d430",
            "image": "UBUNTU22-64-STD",
        }
        for r in ("server", "client", "bridge")
    }
    machine = {**provenance.machine(), "node_type": "d430"}
    return {
        "collected": when,
        "argv": ["quicbed", "run", f"/home/{where}/spec.yaml", "--out", f"/data/{where}"],
        "git": {"sha": "c" * 40, "dirty": False, "now": {"sha": when, "dirty": True}},
        "software": {
            k: {**v, "path": f"/local/{where}/build/bin/{k}"} if isinstance(v, dict) else v
            for k, v in software.items()
        },
        "machine": {**machine, "hostname": f"ctl-{where}"},
        "sysctls": {**provenance.sysctls(), "net.core.rmem_max": str(pid)},
        "python_packages": {"numpy": when},
        "testbed": {"kind": "ssh", "prefix": where, "source": f"/{where}.xml", "nodes": nodes},
        "nodes": {
            r: {
                "machine": {**machine, "hostname": f"{r}.{where}"},
                "sysctls": {**provenance.sysctls(), "net.ipv4.tcp_rmem": f"4096 131072 {pid}"},
            }
            for r in nodes
        },
        "components": {
            "h3": {
                "server": "quic-go",
                "start": {
                    "pid": pid,
                    "ts": when,
                    "addr": "10.1.1.2:4433",
                    "config": {"Log": f"/tmp/{where}/h3.jsonl", "QlogDir": f"/tmp/{where}/q/{pid}"},
                },
            },
            "browser": "HeadlessChrome/156.0.8078.108",
        },
        "traces": {"level": "light", "instruments": ["qlog"], "unavailable": {"x": where}},
    }


def _receipt(buffer: int, offloads: str = "off") -> dict[str, Any]:
    """A receipt's parts the set-up reads: the tuning (its buffers are the condition's)
    with the NIC offloads, and the shaper."""
    return {
        "passed": True,
        "tuning": {
            "net.core.rmem_max": str(buffer),
            "server": {"net.ipv4.tcp_rmem": f"4096 131072 {buffer}"},
            "offloads": {"server:srv": {"tcp-segmentation-offload": offloads}},
        },
        "shaper": {"shaper": "userspace", "emulator": "quicbed-linkem", "config": {"b": buffer}},
    }


def test_pids_times_and_paths_are_one_set_up_a_kernel_or_a_digest_another() -> None:
    a = _attempt_record(101, "2026-11-24T10:00:00", "e1")
    b = _attempt_record(202, "2026-11-25T18:30:00", "e2")
    assert a != b
    assert provenance.setup_identity(a) == provenance.setup_identity(b)
    # a cell's own tuning (buffers of its BDP) is in its receipt, not its set-up
    receipts = {("c1", 1): _receipt(125_000), ("c2", 1): _receipt(9_000_000), ("c3", 1): None}
    provs = {("c1", 1): a, ("c2", 1): b, ("c3", 1): copy.deepcopy(a)}
    (one,) = provenance_groups(provs, receipts)  # c3 failed before its receipt: it joins
    assert one["attempts"] == ["c1#1", "c2#1", "c3#1"]
    # c4 failed on its receipt, before its loads: it has no instruments' record and no
    # browser's word, and joins too (issue 38: a demo that failed on its receipts
    # reported two set-ups, one per source of the browser's version)
    failed = copy.deepcopy(a)
    del failed["traces"], failed["components"]
    provs[("c4", 1)] = failed
    receipts[("c4", 1)] = {**_receipt(125_000), "passed": False}
    (one,) = provenance_groups(provs, receipts)
    assert one["attempts"] == ["c1#1", "c2#1", "c3#1", "c4#1"]
    assert one["browser"] == "HeadlessChrome/156.0.8078.108"
    # a set-up whose first attempt failed before its loads still names the browser by
    # the driver's word of a later attempt: one source for the whole set-up
    (one,) = provenance_groups({("c4", 1): failed, ("c1", 1): a}, receipts)
    assert one["browser"] == "HeadlessChrome/156.0.8078.108"
    kernel = copy.deepcopy(b)
    kernel["nodes"]["server"]["machine"]["kernel"] = "6.12.0-quicbed"
    digest = copy.deepcopy(b)
    digest["software"][QUICHE] = {"path": "/x", "sha256": OLD}
    offloads = {("c1", 1): _receipt(125_000), ("c2", 1): _receipt(125_000, "on")}
    for other, got, why in (
        (kernel, None, "nodes server"),
        (digest, None, f"software {QUICHE}"),
        (b, offloads, "link offloads"),
    ):
        groups = provenance_groups({("c1", 1): a, ("c2", 1): other}, got)
        assert [g["attempts"] for g in groups] == [["c1#1"], ["c2#1"]], why
        assert setup_differences(groups) == [why]


def test_the_report_warns_only_of_set_ups_that_differ(tmp_path: Path, probed: None) -> None:
    """The report's count and warning: two attempts of one set-up (other PIDs, times and
    paths) are one; another kernel makes two, and the warning names it."""
    from quicbed.model.link import make_condition
    from quicbed.spec.cellconfig import make_cell

    a = _attempt_record(101, "2026-11-24T10:00:00", "e1")
    b = _attempt_record(202, "2026-11-25T18:30:00", "e2")
    store = Store(tmp_path, create=True)
    try:
        for mode, prov in (("0rtt", a), ("1rtt", b)):
            cfg = make_cell(
                condition=make_condition(rate_mbit=10, rtt_ms=36), page="5kb", runs=2, mode=mode
            )
            cid = cfg.cell_id()
            store.add_cell(cid, cfg.model_dump(mode="json"))
            store.new_attempt(cid, prov)
            store.set_receipt(cid, 1, _receipt(125_000 if mode == "0rtt" else 9_000_000))
            store.finish_attempt(cid, 1, "done")
    finally:
        store.close()
    build(tmp_path)
    html = (tmp_path / "report" / "index.html").read_text()
    assert len(json.loads((tmp_path / "report" / "provenance.json").read_text())) == 1
    assert "different set-ups" not in html
    b["machine"]["kernel"] = "6.12.0-quicbed"
    store = Store(tmp_path)
    try:
        store.add_provenance(cid, 1, "machine", b["machine"])
    finally:
        store.close()
    build(tmp_path)
    html = (tmp_path / "report" / "index.html").read_text()
    assert "2 different set-ups</b>, differing in machine kernel:" in html


def test_stored_records_of_earlier_versions_still_read() -> None:
    """The version-1 store fixture (software as version strings, no digests, no
    receipts' tuning) gives a set-up identity and a checked software record."""
    fixture = Path(__file__).parent / "fixtures" / "store-v1"
    store = Store.open_readonly(fixture)
    try:
        attempts = store.all_attempts()
    finally:
        store.close()
    assert attempts
    for att in attempts:
        ident = provenance.setup_identity(att.provenance, att.receipt)
        assert ident["software"]["chromium"] == {"version": "72"}
        assert checked_software(att.provenance["software"])["quicbed"] == {"version": "0.1.0"}
