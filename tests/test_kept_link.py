"""``quicbed link up`` / ``link down``: a link kept between commands.

Real namespaces, emulator, servers and browser: a kept link's receipt proves the cells of
later commands (each opening with a spot check), a command that needs another link is
refused before it makes anything, a kept link whose shaping changed is dropped and the
command proves its own, a receipt past its age is taken again and recorded, and
``link down`` removes the shaping and the record and leaves the testbed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from quicbed.link import kept
from quicbed.link.proof import MAX_RECEIPT_AGE_S
from quicbed.results.store import DB_NAME, Store
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.testbed.local import LocalTestbed

QB = [sys.executable, "-m", "quicbed"]
LINK = ["--rate", "10", "--rtt", "36"]
#: the shortest receipt the product offers: what is checked here is its reuse
SHORT = ["--receipt-tcp-seconds", "1"]


def _qb(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QB, *args], capture_output=True, text=True, timeout=timeout)


def _cell(prefix: str, out: Path, *link: str) -> subprocess.CompletedProcess[str]:
    return _qb(
        *["cell", *(link or LINK), "--page", "5kb", "--runs", "2", "--prefix", prefix],
        *["--out", str(out), "--json", *SHORT],
    )


def _attempt_receipt(out: Path) -> tuple[str, list[dict]]:
    """The latest attempt's receipt time and link spans of the one cell in ``out``."""
    with closing(sqlite3.connect(out / DB_NAME)) as con:
        (cid,) = con.execute("SELECT cell_id FROM cells").fetchone()
    store = Store.open_readonly(out)
    try:
        att = store.attempt(cid)
        assert att.status == "done", att.problem
        assert att.receipt is not None
        return att.receipt["created"], store.link_spans(cid, att.attempt)
    finally:
        store.close()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_kept_link_proves_later_commands_and_goes_with_link_down(
    prefix: str, tmp_path: Path
) -> None:
    tb = LocalTestbed(prefix)
    try:
        up = _qb("link", "up", *LINK, "--prefix", prefix, *SHORT)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"testbed {prefix}: link kept" in " ".join(up.stdout.split()), up.stdout
        rec = kept.read(tb)
        assert rec is not None and rec.receipt.passed
        gen = UserspaceShaper().generation(tb)
        assert rec.generation == gen  # the emulator outlived the command that started it
        status = _qb("testbed", "status", "--prefix", prefix)
        assert "keeps a link of 10 Mbit/s" in " ".join(status.stdout.split()), status.stdout

        # a cell on it: no receipt of its own, an opening check, the link left up
        c = _cell(prefix, tmp_path / "a")
        assert c.returncode == 0, c.stdout[-2000:] + c.stderr[-2000:]
        created, spans = _attempt_receipt(tmp_path / "a")
        assert created == rec.receipt.created
        assert [s["shared"] for s in spans] == [1] and spans[0]["opening"]["passed"], spans
        assert "keeps its link (quicbed link up): left up" in c.stderr
        assert UserspaceShaper().generation(tb) == gen and tb.exists()
        # the cell's closing check is recorded for the next command's opening
        after = kept.read(tb)
        assert after is not None and after.closing is not None and after.closing["passed"]

        # again: idempotent, the same receipt
        again = _qb("link", "up", *LINK, "--prefix", prefix, *SHORT)
        assert again.returncode == 0 and "already kept" in again.stdout, again.stdout
        assert kept.read(tb).receipt.created == rec.receipt.created  # type: ignore[union-attr]

        # another link: refused before anything is made, naming both and the way out
        other = _cell(prefix, tmp_path / "b", "--rate", "20", "--rtt", "36")
        assert other.returncode == 2, other.stdout + other.stderr
        said = " ".join(other.stderr.split())
        assert f"testbed {prefix} keeps a link of 10 Mbit/s" in said, said
        assert "this needs 20 Mbit/s" in said and f"quicbed link down --prefix {prefix}" in said
        assert not (tmp_path / "b").exists()
        assert UserspaceShaper().generation(tb) == gen

        down = _qb("link", "down", "--prefix", prefix)
        assert down.returncode == 0 and "taken down" in down.stdout, down.stdout + down.stderr
        assert kept.read(tb) is None and UserspaceShaper().pid(tb) is None
        assert tb.exists()  # the testbed stays; its shaping and record are gone
        down = _qb("link", "down", "--prefix", prefix)
        assert down.returncode == 0 and "keeps no link" in down.stdout
    finally:
        _qb("testbed", "down", "--prefix", prefix)
    assert not tb.kept_link_path().exists()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_kept_link_that_changed_or_aged_is_proven_again(prefix: str, tmp_path: Path) -> None:
    tb = LocalTestbed(prefix)
    try:
        up = _qb("link", "up", *LINK, "--prefix", prefix, *SHORT)
        assert up.returncode == 0, up.stdout + up.stderr
        first = kept.read(tb)
        assert first is not None

        # past its age: the next command measures the kept link again and records that
        old = first.model_copy(update={"measured_unix": time.time() - MAX_RECEIPT_AGE_S - 60})
        kept.write(tb, old)
        c = _cell(prefix, tmp_path / "a")
        assert c.returncode == 0, c.stdout[-2000:] + c.stderr[-2000:]
        created, spans = _attempt_receipt(tmp_path / "a")
        renewed = kept.read(tb)
        assert renewed is not None and renewed.receipt.created == created
        assert created != first.receipt.created and renewed.generation == first.generation
        assert [s["shared"] for s in spans] == [0]  # a receipt of its own: no opening check

        # its emulator gone (as a crash would leave it): kept no more; the cell proves a
        # link of its own, and tears the testbed down as a command without one does
        pid = UserspaceShaper().pid(tb)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        c = _cell(prefix, tmp_path / "b")
        assert c.returncode == 0, c.stdout[-2000:] + c.stderr[-2000:]
        assert "changed since its receipt" in c.stderr and "kept no more" in c.stderr
        created, _ = _attempt_receipt(tmp_path / "b")
        assert created != renewed.receipt.created
        assert kept.read(tb) is None and not tb.exists()

        # a record that cannot be read is named, not guessed at
        tb.kept_link_path().parent.mkdir(parents=True, exist_ok=True)
        tb.kept_link_path().write_text("{not json")
        bad = _cell(prefix, tmp_path / "c")
        assert bad.returncode == 2 and "not a kept link's record" in bad.stderr, bad.stderr
        assert str(tb.kept_link_path()) in bad.stderr
        down = _qb("link", "down", "--prefix", prefix)
        assert down.returncode == 2 and "not a kept link's record" in down.stderr
    finally:
        tb.kept_link_path().unlink(missing_ok=True)
        _qb("testbed", "down", "--prefix", prefix)


def test_the_record_reads_back_and_a_mismatch_is_named() -> None:
    """Without root: the record's round trip and what it matches."""
    from quicbed.link.receipt import Receipt
    from quicbed.model.link import make_condition

    cond = make_condition(rate_mbit=10, rtt_ms=36)
    receipt = Receipt(
        created="2026-12-06T00:00:00+00:00",
        duration_s=1.0,
        testbed={},
        condition=cond.model_dump(mode="json"),
        label=cond.label(),
        shaper={"shaper": "userspace"},
        tuning={},
        checks=[],
        emulator=None,
        passed=True,
        generation="abc",
    )
    rec = kept.KeptLink(
        condition=cond.model_dump(mode="json"),
        shaper="userspace",
        cc="cubic",
        emulator_priority="normal",
        tuning={},
        receipt=receipt,
        measured_unix=time.time(),
    )
    back = kept.KeptLink.model_validate(json.loads(json.dumps(rec.model_dump(mode="json"))))
    assert back == rec and back.generation == "abc"
    assert back.matches(cond, "userspace", "cubic", {}, "normal")
    assert not back.matches(
        make_condition(rate_mbit=20, rtt_ms=36), "userspace", "cubic", {}, "normal"
    )
    assert not back.matches(cond, "netem", "cubic", {}, "normal")
    assert not back.matches(cond, "userspace", "bbr", {}, "normal")
    assert not back.matches(cond, "userspace", "cubic", {"gso": "off"}, "normal")
    assert not back.matches(cond, "userspace", "cubic", {}, "rt")  # the emulator's priority
