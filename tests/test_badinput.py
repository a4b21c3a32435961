"""Every bad input is answered cleanly: a table of them, each run as a real command.

The rule for each case: exit status 2; stderr is exactly one line, ``quicbed: error:
...``, that names the bad option or value (click's usage errors included: no
"Usage:" block, the line ends with where to look instead); no traceback; the
folder the command ran in, and every file the case made first, byte for byte and
mtime for mtime as before; no network namespace made or left. Bad input must be
refused before anything starts, so no case needs a browser or a testbed, and a case
that is not refused fails on its timeout rather than measuring.

Cases that would touch a testbed pass ``--prefix tbad`` so that a case wrongly
accepted could never disturb another testbed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# The report's modules (matplotlib, scipy.stats: 0.6 s) are imported here once, not in
# each forked child (_run) that reaches `quicbed report`'s lazy import of them.
import quicbed.report.build  # noqa: F401
from quicbed.cli import main as cli
from quicbed.model.link import make_condition
from quicbed.package.build import KIND, MANIFEST, PACKAGE_FORMAT
from quicbed.results.store import DB_NAME, Store
from quicbed.spec.cellconfig import make_cell

ROOT = Path(__file__).resolve().parent.parent
PREFIX = ["--prefix", "tbad"]
#: what a cell needs besides the option under test (last occurrence of an option wins)
CELL = ["cell", "--page", "5kb", "--out", "o", "--rate", "10", "--rtt", "36", *PREFIX]
CHECK = ["link", "check", "--rate", "10", "--rtt", "36", *PREFIX]
SPEC = """format: 1
name: t
scenarios:
  base:
    rate: [10]
    rtt: [36]
    pages: [5kb]
"""

Maker = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    needles: tuple[str, ...]  # each must be in the error line
    files: dict[str, bytes | Maker] = field(default_factory=dict)


# --- fixtures made inside a case's folder -----------------------------------------------
def _cell_id() -> str:
    return _cfg().cell_id()


def _cfg():  # type: ignore[no-untyped-def]
    return make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="5kb", runs=20)


def make_store(folder: Path) -> None:
    """A sound results folder: one cell, one finished attempt, and enough bulk in the
    database that cutting it in half removes pages SQLite needs."""
    store = Store(folder, create=True)
    cfg = _cfg()
    store.add_cell(cfg.cell_id(), cfg.model_dump(mode="json"))
    for i in range(60):  # bulk: other cells whose attempts carry a large provenance
        other = make_cell(condition=make_condition(rate_mbit=1000 + i, rtt_ms=36), page="5kb")
        store.add_cell(other.cell_id(), other.model_dump(mode="json"))
        store.new_attempt(other.cell_id(), {"pad": "x" * 2000})
    store.new_attempt(cfg.cell_id(), {})
    store.finish_attempt(cfg.cell_id(), 1, "done")
    store.close()


def _store_bytes() -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        make_store(Path(tmp) / "r")
        return (Path(tmp) / "r" / DB_NAME).read_bytes()


_STORE: list[bytes] = []


def store_bytes() -> bytes:
    if not _STORE:
        _STORE.append(_store_bytes())
    return _STORE[0]


def damaged(kind: str) -> Maker:
    """A results folder whose store.sqlite is damaged in one named way."""

    def make(folder: Path) -> None:
        folder.mkdir()
        db = folder / DB_NAME
        good = store_bytes()
        if kind == "empty":
            db.write_bytes(b"")
        elif kind == "truncated":
            db.write_bytes(good[: len(good) // 2])
        elif kind == "zeroed":
            db.write_bytes(bytes(len(good)))
        elif kind == "text":
            db.write_text("cell_id,plt_ms\nabc,12.5\n")
        elif kind == "random":
            db.write_bytes(random.Random(7).randbytes(8192))
        elif kind == "foreign":  # a sound SQLite database, not a quicbed store
            import sqlite3

            con = sqlite3.connect(db)
            con.execute("CREATE TABLE t (x)")
            con.commit()
            con.close()
        elif kind == "schema9":
            import sqlite3

            db.write_bytes(good)
            con = sqlite3.connect(db)
            con.execute("UPDATE meta SET value='9' WHERE key='schema_version'")
            con.commit()
            con.close()
        elif kind == "folder":
            db.mkdir()
        else:
            raise AssertionError(kind)

    return make


def good_store(folder: Path) -> None:
    folder.mkdir()
    (folder / DB_NAME).write_bytes(store_bytes())


def store_with_report_file(folder: Path) -> None:
    good_store(folder)
    (folder / "report").write_bytes(b"not the report folder")


def package(folder_name: str = "pkg") -> Maker:
    """A minimal replication package whose checksums pass: results/store.sqlite."""

    def make(path: Path) -> None:
        db = store_bytes()
        listed = {"size": len(db), "sha256": hashlib.sha256(db).hexdigest()}
        manifest = {"kind": KIND, "format": PACKAGE_FORMAT, "files": {f"results/{DB_NAME}": listed}}
        with tarfile.open(path, "w:gz") as tar:
            for name, data in (
                (MANIFEST, json.dumps(manifest).encode()),
                (f"results/{DB_NAME}", db),
            ):
                info = tarfile.TarInfo(f"{folder_name}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    return make


def spec(text: str) -> bytes:
    return text.encode()


def sweep_folder(body: bytes) -> Maker:
    def make(folder: Path) -> None:
        folder.mkdir()
        (folder / "sweep.json").write_bytes(body)

    return make


def folder_with(name: str, data: bytes) -> Maker:
    def make(folder: Path) -> None:
        folder.mkdir()
        (folder / name).write_bytes(data)

    return make


# --- the table ----------------------------------------------------------------------------
def _g(v: str) -> str:
    """How an error line shows a float the user gave."""
    return format(float(v), "g")


def cases() -> list[Case]:
    out: list[Case] = []

    def add(id: str, argv: list[str], *needles: str, **files: bytes | Maker) -> None:
        out.append(Case(id, argv, needles, {k.replace("__", "."): v for k, v in files.items()}))

    # 1. click/typer parse errors: unknown commands and options, values of the wrong type
    add("no-such-command", ["nosuchcommand"], "No such command 'nosuchcommand'")
    add("no-such-subcommand", ["testbed", "sideways"], "No such command 'sideways'")
    add("no-such-link-command", ["link", "bend"], "No such command 'bend'")
    for cmd in (
        ["cell"],
        ["run", "s.yaml"],
        ["report", "r"],
        ["export", "r"],
        ["package", "r"],
        ["verify", "p.tar.gz"],
        ["link", "check"],
        ["testbed", "up"],
        ["testbed", "down"],
        ["testbed", "status"],
    ):
        add(
            f"bogus-option-{'-'.join(cmd[:2])}",
            [*cmd, "--bogus-option", "1"],
            "No such option: --bogus-option",
        )
    for opt in ("--rtt", "--loss", "--jitter", "--receipt-tcp-seconds", "--max-hours"):
        for bad in ("abc", ""):
            add(f"cell{opt}={bad!r}", [*CELL, opt, bad], f"'{opt}'", repr(bad))
    for opt in ("--runs", "--warmup", "--seed"):
        for bad in ("abc", "1.5", "1e3", ""):
            add(f"cell{opt}={bad!r}", [*CELL, opt, bad], f"'{opt}'", repr(bad))
    for opt in (
        "--rtt",
        "--delay-down",
        "--delay-up",
        "--loss",
        "--loss-down",
        "--loss-up",
        "--jitter",
        "--tcp-seconds",
        "--seed",
    ):
        add(f"check{opt}=abc", [*CHECK, opt, "abc"], f"'{opt}'", "'abc'")
    add(
        "run-max-hours-abc",
        ["run", "s.yaml", "--out", "o", "--max-hours", "abc"],
        "'--max-hours'",
        "'abc'",
    )
    add("cell-option-needs-value", ["cell", "--rtt"], "'--rtt' requires an argument")
    add("export-format-needs-value", ["export", "r", "--format"], "'--format' requires")
    add("cell-extra-argument", [*CELL, "extra"], "unexpected extra argument", "extra")
    add("check-json-takes-no-value", ["link", "check", "--json", "3"], "unexpected extra", "3")
    add("run-missing-spec", ["run"], "Missing argument", "spec_file")
    add("run-missing-out", ["run", "s.yaml"], "Missing option", "--out")
    add("report-missing-folder", ["report"], "Missing argument")
    add("export-missing-folder", ["export"], "Missing argument")
    add("package-missing-folder", ["package"], "Missing argument")
    add("verify-missing-archive", ["verify"], "Missing argument")

    # 2. numbers out of their physical range: every numeric option x NaN, inf, ...
    ranged = {  # option: (name in the error, bad values)
        "--rate": ("rate", ("nan", "-inf", "-1", "0", "1e12", "10001", "0.001")),
        "--rtt": ("rtt", ("nan", "inf", "-inf", "-1", "1e12", "10001")),
        "--loss": ("loss", ("nan", "inf", "-1", "100", "1e12")),
        "--jitter": ("jitter", ("nan", "inf", "-inf", "-1", "1e12")),
        "--receipt-tcp-seconds": ("--receipt-tcp-seconds", ("nan", "inf", "-1", "0", "1e12")),
        "--max-hours": ("--max-hours", ("nan", "inf", "-inf", "-1", "0")),
    }
    for opt, (name, values) in ranged.items():
        for v in values:
            add(f"cell{opt}={v}", [*CELL, opt, v, "--jitter-kind", "reorder"], name, f"got {_g(v)}")
    for opt, name in (
        ("--rtt", "rtt"),
        ("--delay-down", "delay_down"),
        ("--delay-up", "delay_up"),
        ("--loss-down", "loss_down"),
        ("--loss-up", "loss_up"),
        ("--jitter", "jitter"),
        ("--tcp-seconds", "--tcp-seconds"),
    ):
        for v in ("nan", "inf", "-1", "1e12"):
            argv = [*CHECK, opt, v, "--jitter-kind", "reorder"]
            if opt.startswith("--delay"):  # per-direction delays go without --rtt
                argv = ["link", "check", "--rate", "10", *PREFIX, opt, v]
            add(f"check{opt}={v}", argv, name, f"got {_g(v)}")
    add("check-rate-1e12", [*CHECK, "--rate", "1e12"], "rate", "got 1e+12")
    add("check-rate-empty", [*CHECK, "--rate", ""], "rate", "''")
    add("check-rate-abc", [*CHECK, "--rate", "abc"], "rate", "'abc'")
    add("cell-rate-abc", [*CELL, "--rate", "abc"], "rate", "'abc'")
    add("cell-runs-1", [*CELL, "--runs", "1"], "runs", "got 1")
    add("cell-runs-0", [*CELL, "--runs", "0"], "runs", "got 0")
    add("cell-runs-negative", [*CELL, "--runs", "-5"], "runs", "got -5")
    add("cell-runs-1e9", [*CELL, "--runs", "1000000000"], "runs", "1000000000")
    add("cell-runs-over-budget", [*CELL, "--runs", "5000"], "about", "--max-hours 1", "--yes")
    add(
        "cell-runs-over-max-hours",
        [*CELL, "--runs", "100", "--max-hours", "0.001"],
        "--max-hours 0.001",
        "--yes",
    )
    add("cell-warmup-negative", [*CELL, "--warmup", "-1"], "warmup", "got -1")
    add("cell-warmup-huge", [*CELL, "--warmup", "1000000"], "warmup", "got 1000000")
    add("cell-seed-negative", [*CELL, "--seed", "-1"], "seed", "got -1")
    add("cell-seed-over-int64", [*CELL, "--seed", str(2**64)], "seed", str(2**64))

    # 3. words and combinations
    for value in ("lots", "0pkts", "1.5pkts", "100B", "99999999bdp", "", "-2bdp"):
        add(f"cell-queue={value!r}", [*CELL, "--queue", value], "queue", repr(value))
    add("cell-mode", [*CELL, "--mode", "2rtt"], "mode", "'2rtt'")
    add("cell-arms-unknown", [*CELL, "--arms", "h2,quic"], "arm", "'quic'")
    add("cell-arms-twice", [*CELL, "--arms", "h3,h3"], "arm listed twice")
    add("cell-arms-empty", [*CELL, "--arms", ","], "no arms")
    add("cell-order", [*CELL, "--order", "sideways"], "order", "'sideways'")
    add("cell-cc", [*CELL, "--cc", "bbr3"], "congestion control 'bbr3'", "apache")
    # arms as stacks (issue 11): every knob refused by name before anything starts
    add("cell-arm-stack-unknown", [*CELL, "--arms", "h2,x:stack=msquic"], "unknown stack 'msquic'")
    add("cell-arm-without-stack", [*CELL, "--arms", "h2,h3-n2"], "unknown arm 'h3-n2'", "stack=")
    add(
        "cell-arm-cc-lacking",
        [*CELL, "--arms", "h2,h3", "--cc", "bbr"],
        "arm h3",
        "'bbr'",
        "quic-go",
        "h3:cc=cubic",
    )
    add("cell-arm-own-cc-lacking", [*CELL, "--arms", "h2,h3:cc=bbr"], "arm h3", "'bbr'")
    add(
        "cell-arm-param-lacking",
        [*CELL, "--arms", "h2:cubic_n=2,h3"],
        "apache",
        "no parameter cubic_n",
    )
    for v in ("0", "-1"):
        add(f"cell-arm-cubic-n={v}", [*CELL, "--arms", f"h2,h3:cubic_n={v}"], "cubic_n", f"got {v}")
    add("cell-arm-cubic-n-word", [*CELL, "--arms", "h2,h3:cubic_n=two"], "cubic_n", "'two'")
    for v in ("0", "1", "1.5", "-0.2", "nan"):
        add(
            f"cell-arm-cubic-beta={v}",
            [*CELL, "--arms", f"h2,h3:cubic_beta={v}"],
            "cubic_beta",
            v if v != "nan" else "nan",
        )
    add(
        "cell-arm-loss-detection",
        [*CELL, "--arms", "h2,h3:loss_detection=ild1"],
        "loss_detection 'ild1'",
        "quic-go's (adaptive, rfc9002)",
    )
    add("cell-arm-key", [*CELL, "--arms", "h2,h3:window=9"], "'window=9'", "KEY=VALUE")
    add("cell-arm-no-value", [*CELL, "--arms", "h2,h3:cc"], "'cc'", "KEY=VALUE")
    add("cell-two-tcp-arms", [*CELL, "--arms", "h2,h2b:stack=apache"], "one TCP arm")
    # browsers (issue 29): an unknown one, and what a browser cannot do for an arm
    add("cell-browser-unknown", [*CELL, "--browser", "safari"], "browser", "'safari'")
    add(
        "cell-arm-browser-unknown",
        [*CELL, "--arms", "h2,h3:browser=opera"],
        "arm h3",
        "'opera'",
    )
    add(
        "cell-gquic-in-firefox",
        [*CELL, "--browser", "firefox", "--arms", "h2,gquic"],
        "arm gquic",
        "chromium72",
        "not firefox",
    )
    add(
        "cell-h3-in-chromium72",
        [*CELL, "--browser", "chromium72", "--arms", "h2,h3"],
        "arm h3",
        "chromium72 cannot speak h3",
    )
    add(
        "cell-quiche-0rtt-in-firefox",
        [*CELL, "--browser", "firefox", "--arms", "h2,h3-quiche"],
        "arm h3-quiche",
        "mode 0rtt",
        "NEW_TOKEN",
    )
    add(
        "cell-gquiche-in-firefox",
        [*CELL, "--browser", "firefox", "--arms", "h2,h3-gquiche"],
        "h3-gquiche",
        "NetLog",
        "firefox",
    )
    add(
        "cell-gquiche-local",
        [*CELL, "--arms", "h2,h3-gquiche"],
        "h3-gquiche",
        "only on testbed nodes",
    )
    add("cell-jitter-kind", [*CELL, "--jitter-kind", "wobble"], "jitter kind", "'wobble'")
    add("cell-jitter-without-kind", [*CELL, "--jitter", "5"], "jitter 5 ms needs a jitter kind")
    add(
        "cell-smooth-jitter-over-delay",
        [*CELL, "--jitter", "30", "--jitter-kind", "smooth"],
        "smooth jitter 30 ms",
    )
    add("cell-bdp-queue-without-rtt", [*CELL, "--rtt", "0"], "queue '2bdp'", "RTT is 0")
    add("cell-page", [*CELL, "--page", "7kb"], "unknown page '7kb'")
    add("cell-no-page", ["cell", "--out", "o"], "give --page and --out")
    add("cell-no-out", ["cell", "--page", "5kb"], "give --page and --out")
    add("cell-cell-without-from", [*CELL, "--cell", "abc"], "--cell and --where need --from")
    add("cell-shaper-foo", [*CELL, "--shaper", "foo"], "shaper", "'foo'")
    add("cell-aead", [*CELL, "--aead", "rot13"], "aead 'rot13' is not one of aes-128-gcm")
    add("cell-aead-refused", [*CELL, "--aead", "aes-256-gcm"], "aead aes-256-gcm (the cell's)")
    cert = [*CELL, "--certificate"]
    add("cell-certificate-key", [*cert, "rsa-1024"], "certificate 'rsa-1024'", "ecdsa-p256")
    add("cell-certificate-chain", [*cert, "rsa-2048/4"], "'rsa-2048/4'", "chain of '4'")
    bg = [*CELL, "--background"]
    add("cell-background-form", [*bg, "bulk:tcp"], "background", "'bulk:tcp'", "KIND:TRANSPORT:CC")
    add("cell-background-kind", [*bg, "video:tcp:cubic"], "kind 'video'", "bulk, chunks")
    add("cell-background-transport", [*bg, "bulk:udp:cubic"], "transport 'udp'")
    add("cell-background-tcp-cc", [*bg, "bulk:tcp:vegas"], "cc 'vegas'", "bbr, cubic, reno")
    add("cell-background-quic-cc", [*bg, "bulk:quic:bbr"], "cc 'bbr'", "quic-go has cubic, reno")
    add("cell-background-chunks-every", [*bg, "chunks:tcp:cubic"], "chunks", "every=SECONDS")
    add("cell-background-every-nan", [*bg, "chunks:tcp:cubic:every=x"], "every 'x'")
    add("cell-background-every-0", [*bg, "chunks:tcp:cubic:every=0"], "every 0", "> 0")
    add("cell-background-size", [*bg, "bulk:tcp:cubic:size=12XB"], "size '12XB'")
    add("cell-background-key", [*bg, "bulk:tcp:cubic:rate=5"], "unknown setting 'rate'")
    add("cell-background-direction", [*bg, "bulk:tcp:cubic:direction=in"], "direction 'in'")
    add("cell-background-five", [*bg, ",".join(["bulk:tcp:cubic"] * 5)], "at most 4 flows")
    add(
        "cell-background-shaper-none",
        [*bg, "bulk:tcp:cubic", "--shaper", "none", "--rate", "unlimited", "--rtt", "0"],
        "background flows with shaper none",
    )
    add("cell-shaper-dummynet", [*CELL, "--shaper", "dummynet"], "shaper 'dummynet'")
    add("cell-testbed-unknown", [*CELL, "--testbed", "emulab"], "testbed", "'emulab'")
    add("cell-hosts-without-ssh", [*CELL, "--hosts", "h.xml"], "--hosts")
    add("cell-out-file", [*CELL, "--out", "f"], "--out", "f is a file", f=b"x")
    add("cell-out-under-file", [*CELL, "--out", "f/sub"], "--out", "f is a file", f=b"x")
    add("cell-out-damaged-store", [*CELL, "--out", "r"], "r/store.sqlite", r=damaged("zeroed"))
    none = ["--shaper", "none", "--rate", "unlimited", "--rtt", "0"]
    add(
        "cell-shaper-none-rate",
        [*CELL, *none, "--rate", "50", "--rtt", "10"],
        "shaper none",
        "rate 50 Mbit/s, rtt 10 ms",
    )
    add("cell-shaper-none-rtt", [*CELL, *none, "--rtt", "36"], "shaper none", "rtt 36 ms")
    add("cell-shaper-none-loss", [*CELL, *none, "--loss", "1"], "shaper none", "loss 1 %")
    add(
        "cell-shaper-none-jitter",
        [*CELL, *none, "--jitter", "5", "--jitter-kind", "reorder"],
        "shaper none",
        "jitter 5 ms",
    )
    add("check-shaper-none-rate", [*CHECK, "--shaper", "none"], "shaper none", "rate 10 Mbit/s")
    add(
        "bulk-shaper-none-delay",
        ["bulk", "--out", "o", "--shaper", "none", "--delay-down", "5", *PREFIX],
        "shaper none",
        "delay down 5 ms",
    )
    add("cell-offloads-unknown", [*CELL, *none, "--offloads", "lro=on"], "unknown offload 'lro'")
    add("cell-offloads-value", [*CELL, *none, "--offloads", "gso=yes"], "gso='yes'", "on or off")
    add(
        "cell-offloads-shaped",
        [*CELL, "--offloads", "gso=on,gro=on"],
        "offloads gro=on,gso=on with shaper auto",
        "needs shaper none",
    )
    add(
        "bulk-offloads-netem",
        ["bulk", "--out", "o", "--shaper", "netem", "--offloads", "tso=on", *PREFIX],
        "offloads tso=on with shaper netem",
    )
    add("cell-placement-role", [*CELL, "--placement", "browser=1"], "--placement", "'browser=1'")
    add("cell-placement-cpus", [*CELL, "--placement", "server=97"], "server=97", "host has CPUs")
    add("cell-profile", [*CELL, "--profile", "gpu"], "profile", "'gpu'")
    add("bulk-profile", ["bulk", "--out", "o", "--profile", "gpu", *PREFIX], "profile", "'gpu'")
    add("check-count", [*CHECK, "--count", "bits"], "count", "'bits'")
    add("check-shaper-foo", [*CHECK, "--shaper", "foo"], "shaper", "'foo'")
    add("check-shaper-dummynet", [*CHECK, "--shaper", "dummynet"], "shaper 'dummynet'")
    add("check-rtt-and-delays", [*CHECK, "--delay-up", "5"], "either rtt or per-direction")
    add("check-out-exists", [*CHECK, "--out", "f"], "--out", "exists", f=b"{}")
    add("check-out-missing-folder", [*CHECK, "--out", "no/such/r.json"], "--out", "no/such")
    add("testbed-up-bad-prefix", ["testbed", "up", "--prefix", "no such/prefix"], "prefix")

    # 4. sweep specs
    run = ["run", "s.yaml", "--out", "o", *PREFIX]
    specs = {
        "random-bytes": (random.Random(1).randbytes(4096), ("s.yaml", "UTF-8")),
        "nul-bytes": (b"name: t\x00\n", ("s.yaml", "not YAML")),
        "empty": (b"", ("s.yaml", "a sweep spec is a mapping")),
        "a-list": (b"- 1\n- 2\n", ("s.yaml", "a sweep spec is a mapping")),
        "not-yaml": (b"a: [1,\n", ("s.yaml", "not YAML")),
        "python-tag": (b"name: !!python/object:os.system x\n", ("s.yaml", "python/object")),
        "duplicate-scenario": (
            spec(SPEC + "  base:\n    rate: [50]\n    rtt: [36]\n    pages: [1mb]\n"),
            ("duplicate key 'base'", "line 8", "first on line 4"),
        ),
        "duplicate-top-key": (
            spec(SPEC + "name: u\n"),
            ("duplicate key 'name'", "line 8", "first on line 2"),
        ),
        "duplicate-defaults-key": (
            spec(SPEC + "defaults: {runs: 5, runs: 6}\n"),
            ("duplicate key 'runs'", "line 8"),
        ),
        "jitter-nan": (
            spec(SPEC + "    jitter: [.nan]\n    jitter_kind: reorder\n"),
            ("jitter", "nan"),
        ),
        "rate-nan": (spec(SPEC.replace("rate: [10]", "rate: [.nan]")), ("rate", "nan")),
        "rate-inf": (spec(SPEC.replace("rate: [10]", "rate: [.inf]")), ("rate", "inf")),
        "rate-1e12": (spec(SPEC.replace("rate: [10]", "rate: [1e12]")), ("rate", "got 1e+12")),
        "rate-string": (spec(SPEC.replace("rate: [10]", "rate: [fast]")), ("rate", "'fast'")),
        "rtt-inf": (spec(SPEC.replace("rtt: [36]", "rtt: [.inf]")), ("rtt", "inf")),
        "rtt-1e9": (spec(SPEC.replace("rtt: [36]", "rtt: [1000000000]")), ("rtt", "1e+09")),
        "rtt-negative": (spec(SPEC.replace("rtt: [36]", "rtt: [-1]")), ("rtt", "got -1")),
        "loss-nan": (spec(SPEC + "    loss: [.nan]\n"), ("loss", "nan")),
        "loss-100": (spec(SPEC + "    loss: [100]\n"), ("loss", "got 100")),
        "runs-1": (spec(SPEC + "defaults: {runs: 1}\n"), ("runs", "got 1")),
        "runs-1e9": (spec(SPEC + "defaults: {runs: 1000000000}\n"), ("runs", "1000000000")),
        "warmup-negative": (spec(SPEC + "defaults: {warmup: -1}\n"), ("warmup", "got -1")),
        "load-timeout-inf": (
            spec(SPEC + "defaults: {load_timeout_s: .inf}\n"),
            ("load_timeout_s", "inf"),
        ),
        "receipt-seconds-nan": (
            spec(SPEC + "receipt_tcp_seconds: .nan\n"),
            ("receipt_tcp_seconds", "nan"),
        ),
        "receipt-seconds-1e12": (
            spec(SPEC + "receipt_tcp_seconds: 1.0e12\n"),
            ("receipt_tcp_seconds", "1.0e12"),
        ),
        "receipt-seconds-0": (spec(SPEC + "receipt_tcp_seconds: 0\n"), ("receipt_tcp_seconds",)),
        "alpha-nan": (spec(SPEC + "statistics: {alpha: .nan}\n"), ("alpha", "nan")),
        "seed-huge": (spec(SPEC + f"defaults: {{seed: {2**64}}}\n"), ("seed", str(2**64))),
        "unknown-key": (spec(SPEC + "    colour: red\n"), ("colour",)),
        "unknown-page": (spec(SPEC.replace("[5kb]", "[7kb]")), ("unknown page '7kb'",)),
        "shaper": (spec(SPEC + "shaper: foo\n"), ("shaper", "'foo'")),
        "profile": (spec(SPEC + "profile: gpu\n"), ("profile", "'gpu'")),
        "shaper-none-with-a-rate": (
            spec(SPEC + "shaper: none\n"),
            ("scenarios.base", "shaper none", "rate 10 Mbit/s, rtt 36 ms"),
        ),
        "testbed": (spec(SPEC + "testbed: emulab\n"), ("testbed", "'emulab'")),
        "format": (spec(SPEC.replace("format: 1", "format: 9")), ("format 9",)),
        "no-scenarios": (b"format: 1\nname: t\nscenarios: {}\n", ("scenarios is empty",)),
        "no-name": (spec(SPEC.replace("name: t\n", "")), ("name", "Field required")),
        "empty-grid": (spec(SPEC.replace("rtt: [36]", "rtt: []")), ("rtt", "is empty")),
        "arm-stack": (
            spec(SPEC + "defaults: {arms: {h2: {}, q: {stack: lsquic}}}\n"),
            ("scenarios.base", "unknown stack 'lsquic'"),
        ),
        "arm-cc": (spec(SPEC + "    cc: bbr\n"), ("scenarios.base", "arm h3", "'bbr'")),
        "arm-beta": (
            spec(SPEC + "defaults: {arms: {h2: {}, h3: {cubic_beta: 1.2}}}\n"),
            ("cubic_beta", "1.2"),
        ),
        "arm-key": (spec(SPEC + "defaults: {arms: {h2: {}, h3: {beta: 0.5}}}\n"), ("beta",)),
        "pair-unknown": (
            spec(SPEC + "statistics: {pairs: [h3/h3-quiche]}\n"),
            ("pair h3/h3-quiche", "no cell has both arms"),
        ),
        "pair-self": (
            spec(SPEC + "statistics: {pairs: [h3/h3]}\n"),
            ("compares an arm with itself",),
        ),
        "pair-form": (spec(SPEC + "statistics: {pairs: [h3-h2]}\n"), ("pair 'h3-h2'", "ARM/ARM")),
        "background": (
            spec(SPEC + '    background: [none, "bulk:tcp:westwood"]\n'),
            ("scenarios.base", "cc 'westwood'"),
        ),
        "background-empty": (spec(SPEC + "    background: []\n"), ("background", "is empty")),
        "certificate": (
            spec(SPEC + "    certificate: [ecdsa-p256, rsa-8192]\n"),
            ("scenarios.base", "certificate 'rsa-8192'"),
        ),
        "certificate-bulk-cell": (
            spec(
                SPEC.replace("pages: [5kb]", "kind: bulk\n    objects: [1MB]")
                + "    certificate: [rsa-2048/3]\n"
            ),
            ("certificate rsa-2048/3 is for page cells",),
        ),
        "background-bulk-cell": (
            spec(
                SPEC.replace("pages: [5kb]", "kind: bulk\n    objects: [1MB]")
                + '    background: ["bulk:tcp:cubic"]\n'
            ),
            ("scenarios.base", "background flows run beside page loads"),
        ),
    }
    for name, (body, needles) in specs.items():
        add(f"spec-{name}", run, *needles, s__yaml=body)
    add("spec-missing", run, "s.yaml", "No such file")
    add("spec-is-folder", run, "s.yaml", "not a regular file", s__yaml=lambda p: p.mkdir())
    add(
        "spec-not-regular",
        ["run", "/dev/zero", "--out", "o", *PREFIX],
        "/dev/zero",
        "not a regular file",
    )
    for v in ("nan", "inf", "0", "-1"):
        add(
            f"run-max-hours={v}",
            [*run, "--max-hours", v],
            "--max-hours",
            f"got {_g(v)}",
            s__yaml=spec(SPEC),
        )
    long_look = str(ROOT / "sweeps" / "long-look.yaml")
    add(
        "run-long-sweep-without-yes",
        ["run", long_look, "--out", "o", *PREFIX],
        "156 cells",
        "--yes",
    )
    add(
        "run-testbed-unknown",
        [*run, "--testbed", "emulab"],
        "--testbed",
        "'emulab'",
        s__yaml=spec(SPEC),
    )
    add(
        "run-out-file", [*run[:3], "f", *PREFIX], "--out", "f is a file", s__yaml=spec(SPEC), f=b"x"
    )
    add(
        "run-out-under-file",
        [*run[:3], "f/sub", *PREFIX],
        "--out",
        "f is a file",
        s__yaml=spec(SPEC),
        f=b"x",
    )
    add(
        "run-out-not-a-sweep",
        [*run[:3], "d", *PREFIX],
        "d is not empty",
        "no quicbed sweep",
        s__yaml=spec(SPEC),
        d=folder_with("notes.txt", b"mine"),
    )
    add(
        "run-out-damaged-sweep",
        [*run[:3], "d", "--resume", *PREFIX],
        "d/sweep.json",
        s__yaml=spec(SPEC),
        d=sweep_folder(b"{not json"),
    )
    held = json.dumps({"spec": {"name": "other"}, "digest": "0", "software": {}}).encode()
    add(
        "run-out-other-sweep",
        [*run[:3], "d", *PREFIX],
        "holds sweep 'other'",
        "--resume",
        s__yaml=spec(SPEC),
        d=sweep_folder(held),
    )
    add(
        "run-out-other-spec",
        [*run[:3], "d", "--resume", *PREFIX],
        "holds another spec",
        s__yaml=spec(SPEC),
        d=sweep_folder(held),
    )

    # 5. results stores: readers never make, mend or half-read a damaged one
    kinds = ("empty", "truncated", "zeroed", "text", "random", "foreign", "schema9", "folder")
    readers = {
        "report": ["report", "r"],
        "export": ["export", "r"],
        "package": ["package", "r"],
        "cell-from": ["cell", "--from", "r", "--cell", "abc", *PREFIX],
    }
    for kind in kinds:
        for rname, argv in readers.items():
            add(f"store-{kind}-{rname}", argv, "r/store.sqlite", r=damaged(kind))
    for rname, argv in readers.items():
        add(f"store-missing-folder-{rname}", argv, "r")
        add(f"store-no-db-{rname}", argv, "r", r=folder_with("notes.txt", b"x"))
    add(
        "export-o-missing-folder",
        ["export", "r", "-o", "no/such/runs.csv"],
        "-o",
        "no/such",
        r=good_store,
    )
    add(
        "export-o-folder",
        ["export", "r", "-o", "d"],
        "-o",
        "d is a folder",
        r=good_store,
        d=folder_with("x", b"x"),
    )
    add("export-format", ["export", "r", "--format", "xml"], "--format", "'xml'", r=good_store)
    add(
        "export-exists",
        ["export", "r", "-o", "f.csv"],
        "f.csv exists",
        "--replace",
        r=good_store,
        f__csv=b"a,b\n",
    )
    add("package-o-name", ["package", "r", "-o", "x.zip"], "-o", "x.zip", r=good_store)
    add("package-o-missing-folder", ["package", "r", "-o", "no/x.tar.gz"], "-o", "no", r=good_store)
    add("report-out-is-file", ["report", "r"], "r/report is a file", r=store_with_report_file)
    from_r = ["cell", "--from", "r", *PREFIX]
    add(
        "from-unknown-cell", [*from_r, "--cell", "ffffff"], "no cell matches 'ffffff'", r=good_store
    )
    add("from-ambiguous-cell", [*from_r, "--cell", ""], "exactly one of --cell", r=good_store)
    add(
        "from-both-selectors",
        [*from_r, "--cell", "a", "--where", "rate=10"],
        "exactly one of --cell",
        r=good_store,
    )
    add(
        "from-where-unknown-key",
        [*from_r, "--where", "colour=red"],
        "--where",
        "'colour'",
        r=good_store,
    )
    add("from-where-not-key-value", [*from_r, "--where", "rate"], "--where", "'rate'", r=good_store)
    add(
        "from-where-no-match",
        [*from_r, "--where", "page=1mb"],
        "no cell matches 'page=1mb'",
        r=good_store,
    )
    add(
        "from-over-max-hours",
        [*from_r, "--cell", _cell_id(), "--max-hours", "1e-9"],
        "--max-hours 1e-09",
        r=good_store,
    )
    add(
        "from-out-file",
        [*from_r, "--cell", _cell_id(), "--out", "f"],
        "--out",
        "f is a file",
        r=good_store,
        f=b"x",
    )

    # 6. replication packages: a refused rerun leaves nothing extracted
    from_p = ["cell", "--from", "p.tar.gz", *PREFIX]
    add(
        "pkg-unknown-cell",
        [*from_p, "--cell", "ffffff"],
        "no cell matches 'ffffff'",
        p__tar__gz=package(),
    )
    add(
        "pkg-where-no-match",
        [*from_p, "--where", "rate=50"],
        "no cell matches 'rate=50'",
        p__tar__gz=package(),
    )
    add(
        "pkg-over-max-hours",
        [*from_p, "--cell", _cell_id(), "--max-hours", "1e-9"],
        "--max-hours 1e-09",
        p__tar__gz=package(),
    )
    add(
        "pkg-bad-receipt-seconds",
        [*from_p, "--cell", _cell_id(), "--receipt-tcp-seconds", "nan"],
        "--receipt-tcp-seconds",
        "nan",
        p__tar__gz=package(),
    )
    add(
        "pkg-out-file",
        [*from_p, "--cell", _cell_id(), "--out", "f"],
        "--out",
        "f is a file",
        p__tar__gz=package(),
        f=b"x",
    )
    add(
        "pkg-rerun-folder-taken",
        [*from_p, "--cell", _cell_id(), "--out", "d"],
        "d exists",
        p__tar__gz=package(),
        d=folder_with("notes.txt", b"x"),
    )
    bad_pkgs = {
        "empty": b"",
        "text": b"not an archive\n",
        "random": random.Random(3).randbytes(4096),
        "truncated-gzip": gzip.compress(b"x" * 10000)[:40],
    }
    for name, body in bad_pkgs.items():
        add(f"pkg-{name}-cell-from", [*from_p, "--cell", "abc"], "p.tar.gz", p__tar__gz=body)
        add(f"pkg-{name}-verify", ["verify", "p.tar.gz"], "p.tar.gz", p__tar__gz=body)
    add("verify-missing", ["verify", "p.tar.gz"], "p.tar.gz", "no such file")
    add("verify-folder", ["verify", "d"], "d is a folder", d=folder_with("x", b"x"))
    return out


CASES = cases()


# --- running one case -------------------------------------------------------------------
def _snapshot(top: Path) -> dict[str, tuple[str, str, int]]:
    """Every path below ``top``: kind, content hash (files) and mtime (files)."""
    snap: dict[str, tuple[str, str, int]] = {}
    for p in sorted(top.rglob("*")):
        rel = p.relative_to(top).as_posix()
        if p.is_file() and not p.is_symlink():
            snap[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        else:
            snap[rel] = ("dir" if p.is_dir() else "other", "", 0)
    return snap


def _netns() -> list[str]:
    """Namespaces a case could have made (other tests may make theirs meanwhile); the
    netns probe of ``--shaper auto|netem`` must have removed its own again."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = (line.split()[0] for line in out.splitlines() if line.strip())
    return sorted(n for n in names if n.startswith(PREFIX[1] + "-") or n.startswith("qb-"))


def _make(case: Case, folder: Path) -> None:
    for name, content in case.files.items():
        path = folder / name
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)


def _run(argv: list[str], folder: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``quicbed ARGV`` in ``folder``: the real ``main()`` in a real child process.

    The child is forked from this test process, which has imported quicbed once, rather
    than started afresh (287 interpreter starts and imports were most of this file's
    minutes); it is still a separate process with its own exit status, stdout and
    stderr, and an uncaught exception prints its traceback there as it would in a shell.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.chdir(folder)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's own stdout
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.environ.update(COLUMNS="200", NO_COLOR="1")
            sys.argv = ["quicbed", *argv]
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map() and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
        working = bool(sel.get_map())  # not refused: still running at the deadline
    if working:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    for fd in chunks:
        os.close(fd)
    out, err = (b"".join(chunks[fd]).decode(errors="replace") for fd in (out_r, err_r))
    return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), out, err)


def test_the_table_is_big_and_distinct() -> None:
    assert len(CASES) >= 150, len(CASES)
    assert len({c.id for c in CASES}) == len(CASES), "case ids repeat"
    inputs = [
        (tuple(c.argv), tuple(sorted((k, str(v)) for k, v in c.files.items()))) for c in CASES
    ]
    assert len(set(inputs)) == len(CASES), "two cases give the same input"


#: cases refused only after their command's check for root (as another user they are
#: refused for that instead): marked root, so `make check` leaves them to `make test`
ROOT_FIRST = {
    "cell-gquiche-local",
    "cell-placement-cpus",
    "cell-shaper-dummynet",
    "check-shaper-foo",
    "check-shaper-dummynet",
    "testbed-up-bad-prefix",
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.root) if c.id in ROOT_FIRST else c for c in CASES],
    ids=[c.id for c in CASES],
)
def test_bad_input_is_refused_cleanly(case: Case, tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    _make(case, folder)
    before = _snapshot(folder)
    ns_before = _netns()
    cp = _run(case.argv, folder)
    assert "Traceback" not in cp.stderr + cp.stdout, cp.stderr
    lines = [line for line in cp.stderr.splitlines() if line.strip()]
    assert cp.returncode == 2, (cp.returncode, cp.stderr, cp.stdout[-2000:])
    assert len(lines) == 1, cp.stderr
    assert lines[0].startswith("quicbed: error: "), lines[0]
    for needle in case.needles:
        assert needle in lines[0], (needle, lines[0])
    assert _snapshot(folder) == before, "the command created or changed something"
    assert _netns() == ns_before


def test_a_cell_id_prefix_says_which_cell_it_matched(tmp_path: Path) -> None:
    """A unique prefix of a cell ID is accepted, but never silently: the matched cell
    is named on stderr before anything else happens (here the time budget refuses)."""
    good_store(tmp_path / "r")
    cid = _cell_id()
    before = _snapshot(tmp_path)
    cp = _run(["cell", "--from", "r", "--cell", cid[:6], "--max-hours", "1e-9", *PREFIX], tmp_path)
    lines = [line for line in cp.stderr.splitlines() if line.strip()]
    assert cp.returncode == 2, cp.stderr
    assert lines[0] == f"quicbed: --cell {cid[:6]} matched cell {cid}", cp.stderr
    assert lines[1].startswith("quicbed: error: this would take about"), cp.stderr
    assert _snapshot(tmp_path) == before
