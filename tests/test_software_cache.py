"""A component's software record is given again only while the files it comes from are
the same (quicbed.results.software_cache), so keeping it never hides a rebuild.

Real files and real commands on this machine, each test with its own cache file: a
record kept, then every way a file can change (a rewrite of the same bytes, a rename
over it, a new program earlier on PATH, a missing file that appears), another boot,
the racy seconds after a change, a file system not counted as local, a probe that names
nothing, and a broken or unwritable cache. Then provenance's whole record, kept.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from quicbed.paths import Run, reads
from quicbed.results import provenance, software_cache
from quicbed.results.software_cache import SoftwareCache

#: a text file old enough for the racy rule, on every machine that runs quicbed
OLD_FILE = os.path.realpath("/etc/os-release")
#: runs a command on this machine (as provenance asks the local testbed)
HERE: Run = provenance.ask(None, "client")


class Probe:
    """A probe of the files it is given, counting how often it really ran: what it
    reports is each file's bytes (or None where one is missing)."""

    def __init__(self, *files: str) -> None:
        self.files = files
        self.ran = 0

    def __call__(self, run: Run) -> dict[str, Any]:
        self.ran += 1
        reads(run, *self.files)
        return {f: run(["cat", f]) for f in self.files}


def _get(cache_file: Path, probe: Probe, key: str = "k") -> tuple[Any, str]:
    """The record as a new process would find it: a cache read from the file, saved."""
    cache = SoftwareCache(cache_file)
    record = cache.probed(HERE, key, probe)
    cache.save()
    return record, cache.outcomes[key]


@pytest.fixture
def no_racy_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file just written counts as old (the racy rule is its own test's): the tests of
    a change write their files and probe them at once. Each change still waits out the
    kernel's file clock tick, as a real rebuild is never within one of its probe."""
    monkeypatch.setattr(software_cache, "RACY_S", -3600.0)


def _tick() -> None:
    time.sleep(0.05)  # longer than a jiffy at HZ=100: a later change has a later ctime


def test_a_record_is_given_again_while_its_file_stays_the_same(tmp_path: Path) -> None:
    cache_file = tmp_path / "records.json"
    probe = Probe(OLD_FILE)
    first, how = _get(cache_file, probe)
    assert how == "probed" and probe.ran == 1 and first[OLD_FILE]
    again, how = _get(cache_file, probe)
    assert (how, probe.ran, again) == ("kept", 1, first)
    again[OLD_FILE] = "changed by its reader"  # a copy: the kept record is untouched
    assert _get(cache_file, probe)[0] == first
    entry = json.loads(cache_file.read_text())["k"]
    assert entry["files"][0].startswith(f"{OLD_FILE}\t{OLD_FILE}\t")
    assert entry["boot"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.mark.usefixtures("no_racy_wait")
def test_any_change_to_a_file_probes_it_again(tmp_path: Path) -> None:
    cache_file = tmp_path / "records.json"
    program = tmp_path / "program"
    program.write_text("build 1\n")
    probe = Probe(str(program))
    assert _get(cache_file, probe) == ({str(program): "build 1"}, "probed")
    assert _get(cache_file, probe)[1] == "kept"
    _tick()
    program.write_text("build 1\n")  # the same bytes written again: another ctime
    assert _get(cache_file, probe) == ({str(program): "build 1"}, "probed")
    _tick()
    (tmp_path / "new").write_text("build 2\n")
    (tmp_path / "new").rename(program)  # a rename over it: another inode
    assert _get(cache_file, probe) == ({str(program): "build 2"}, "probed")
    _tick()
    with program.open("r+") as f:  # bytes changed in place, the same size
        f.write("build 3\n")
    assert _get(cache_file, probe) == ({str(program): "build 3"}, "probed")
    assert _get(cache_file, probe) == ({str(program): "build 3"}, "kept")
    assert probe.ran == 4


@pytest.mark.usefixtures("no_racy_wait")
def test_a_missing_file_is_kept_as_missing_until_it_appears(tmp_path: Path) -> None:
    cache_file = tmp_path / "records.json"
    later = tmp_path / "not-yet"
    probe = Probe(str(later))
    assert _get(cache_file, probe) == ({str(later): None}, "probed")
    assert _get(cache_file, probe) == ({str(later): None}, "kept")
    later.write_text("installed\n")
    assert _get(cache_file, probe) == ({str(later): "installed"}, "probed")


@pytest.mark.usefixtures("no_racy_wait")
def test_a_name_is_the_program_path_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name is looked up on PATH: a program of that name earlier on PATH, or a link
    pointed elsewhere, is another file."""
    cache_file = tmp_path / "records.json"
    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()
    (second / "tool").write_text("#!/bin/sh\necho second\n")
    (second / "tool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{first}:{second}:{os.environ['PATH']}")

    def probe(run: Run) -> str | None:
        reads(run, "tool")
        return run(["tool"])

    def get() -> tuple[Any, str]:
        cache = SoftwareCache(cache_file)
        record = cache.probed(HERE, "tool", probe)
        cache.save()
        return record, cache.outcomes["tool"]

    assert get() == ("second", "probed")
    assert get() == ("second", "kept")
    (first / "tool").write_text("#!/bin/sh\necho first\n")
    (first / "tool").chmod(0o755)
    assert get() == ("first", "probed")
    assert get() == ("first", "kept")
    (first / "tool").unlink()
    (first / "tool").symlink_to(second / "tool")  # a link is the file it points to
    assert get() == ("second", "probed")
    assert get() == ("second", "kept")


def test_a_file_changed_just_before_its_probe_is_not_kept(tmp_path: Path) -> None:
    """Within RACY_S of a change, the file could change again within the clock's tick
    and keep its identity: its record is probed every time until the file is older."""
    cache_file = tmp_path / "records.json"
    program = tmp_path / "program"
    program.write_text("just built\n")
    probe = Probe(str(program), OLD_FILE)
    assert _get(cache_file, probe)[1] == "probed"
    assert _get(cache_file, probe)[1] == "probed"
    assert not cache_file.exists() or "k" not in json.loads(cache_file.read_text())


@pytest.mark.usefixtures("no_racy_wait")
def test_another_boot_or_file_system_is_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_file = tmp_path / "records.json"
    probe = Probe(OLD_FILE)
    _get(cache_file, probe)
    records = json.loads(cache_file.read_text())
    records["k"]["boot"] = "another boot"
    cache_file.write_text(json.dumps(records))
    assert _get(cache_file, probe)[1] == "probed"
    assert _get(cache_file, probe)[1] == "kept"
    monkeypatch.setattr(software_cache, "LOCAL_FILE_SYSTEMS", frozenset())
    cache_file.unlink()
    assert _get(cache_file, probe)[1] == "probed"
    assert _get(cache_file, probe)[1] == "probed"  # not a local file system: never kept


def test_a_probe_that_names_no_file_runs_every_time(tmp_path: Path) -> None:
    probe = Probe()
    for _ in range(2):
        assert _get(tmp_path / "records.json", probe) == ({}, "probed")
    assert probe.ran == 2


def test_a_record_of_other_code_is_probed_again(tmp_path: Path) -> None:
    """A record is kept for the code that probed it: another quicbed's (a probe that now
    records more, or reads another file) is not given."""
    cache_file = tmp_path / "records.json"
    probe = Probe(OLD_FILE)
    _get(cache_file, probe)
    records = json.loads(cache_file.read_text())
    assert records["k"]["code"] == software_cache.code_digest()
    records["k"]["code"] = "0" * 64
    cache_file.write_text(json.dumps(records))
    assert _get(cache_file, probe)[1] == "probed"
    assert _get(cache_file, probe)[1] == "kept"


def test_a_broken_or_unwritable_cache_is_no_cache(tmp_path: Path) -> None:
    broken = tmp_path / "records.json"
    broken.write_text("{not json")
    probe = Probe(OLD_FILE)
    assert _get(broken, probe)[1] == "probed"
    assert _get(broken, probe)[1] == "kept"  # written anew
    for entry in ({"files": "not a list", "record": 1}, {"files": [7]}, [], None):
        broken.write_text(json.dumps({"k": entry, "other": entry, "u": {"used": "x"}}))
        assert _get(broken, probe)[1] == "probed", entry
        assert _get(broken, probe)[1] == "kept", entry
    blocked = tmp_path / "a-file" / "records.json"  # its folder is a file
    blocked.parent.write_text("")
    assert _get(blocked, probe)[1] == "probed"
    assert _get(blocked, probe)[1] == "probed"
    assert sorted(tmp_path.iterdir()) == [blocked.parent, broken]  # no temporary file left


def test_the_least_recently_used_records_go_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(software_cache, "MAX_RECORDS", 2)
    cache_file = tmp_path / "records.json"
    probe = Probe(OLD_FILE)
    for key in ("a", "b", "a", "c"):
        _get(cache_file, probe, key)
    assert sorted(json.loads(cache_file.read_text())) == ["a", "c"]


@pytest.mark.built
def test_provenance_keeps_every_component_it_can_and_records_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole software record twice, as two attempts find it: the second probes
    nothing whose files were unchanged, and is the same record. Every component names
    its files (a browser or stack not installed here is kept as not installed). A
    program rebuilt in between is probed again, and its new digest recorded."""
    monkeypatch.setattr(software_cache, "RACY_S", -3600.0)
    built = Path(provenance._bindir(None, "server"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for program in built.iterdir():  # quicbed's programs, where a test may rebuild one
        (bindir / program.name).symlink_to(program)
    monkeypatch.setenv("QUICBED_BIN_DIR", str(bindir))
    cache_file = tmp_path / "records.json"
    first_cache = SoftwareCache(cache_file)
    first = provenance.software(cache=first_cache)
    assert set(first_cache.outcomes.values()) == {"probed"}
    second_cache = SoftwareCache(cache_file)
    assert provenance.software(cache=second_cache) == first
    assert set(second_cache.outcomes.values()) == {"kept"}
    probed = {key.split("\t")[1] for key in second_cache.outcomes}
    assert probed == set(first) - {"quicbed", "python", "iperf3", "node"}
    _tick()
    (bindir / provenance.LINK_EMULATOR).unlink()
    (bindir / provenance.LINK_EMULATOR).write_bytes(b"\x7fELF rebuilt")
    third_cache = SoftwareCache(cache_file)
    third = provenance.software(cache=third_cache)
    rebuilt = [k for k, v in third_cache.outcomes.items() if v == "probed"]
    assert [k.split("\t")[1] for k in rebuilt] == [provenance.LINK_EMULATOR]
    assert third[provenance.LINK_EMULATOR]["sha256"] != first[provenance.LINK_EMULATOR]["sha256"]
    assert {k: v for k, v in third.items() if k != provenance.LINK_EMULATOR} == {
        k: v for k, v in first.items() if k != provenance.LINK_EMULATOR
    }
