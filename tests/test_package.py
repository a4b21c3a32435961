"""Replication packages from a real one-cell sweep: package, verify, tamper, refuse, rerun.

One sweep (real namespaces, servers, Chromium) and one package are made per module
and shared; every test that changes something works on its own copy.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from conftest import SharedLinks
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quicbed.model.link import make_condition
from quicbed.package.secretscan import scan_file, user_needles
from quicbed.results.folder import folder_lock
from quicbed.results.store import DB_NAME
from quicbed.tarsafe import safe_extract

QB = [sys.executable, "-m", "quicbed"]
SPEC = """
format: 1
name: one
receipt_tcp_seconds: 1
defaults: {runs: 5, warmup: 1}
scenarios:
  base:
    rate: [50]
    rtt: [20]
    pages: [5kb]
"""
#: loads in the sweep: 2 arms x (5 runs + 1 warm-up). Five runs, so that one load the
#: busy machine spoils (the cell needs 4 of 5 valid) does not fail the rerun's comparison.
LOADS = 2 * (5 + 1)


def _stored_loads(res: Path) -> int:
    """The loads the sweep stored: LOADS, and one more for each load the busy host
    spoiled and the cell replaced (each kept, invalid, with its HAR)."""
    with closing(sqlite3.connect(res / DB_NAME)) as con:
        (n,) = con.execute("SELECT COUNT(*) FROM runs").fetchone()
    assert n >= LOADS, n
    return int(n)


def qb(*args: object, home: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run quicbed with HOME pointing at a test home: the secret scan never reads the
    real ~/.ssh."""
    env = {**os.environ, "HOME": str(home), **env}
    return subprocess.run(
        [*QB, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("package")


@pytest.fixture(scope="module")
def home(base: Path) -> Path:
    (base / "home").mkdir()
    return base / "home"


@pytest.fixture(scope="module")
def sweep(base: Path, home: Path, shared_links: SharedLinks) -> tuple[Path, str, str]:
    """(results folder, testbed prefix, cell ID) of a finished one-cell sweep, measured on
    the suite's kept 50 Mbit/s, 20 ms link (conftest.SharedLinks), whose receipt its
    rerun from the package reuses too: the package carries the receipt it ran under."""
    prefix = shared_links.kept_prefix(make_condition(rate_mbit=50, rtt_ms=20))
    (base / "one.yaml").write_text(SPEC)
    out = base / "res"
    cp = qb("run", base / "one.yaml", "--out", out, "--prefix", prefix, home=home, timeout=300)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    with closing(sqlite3.connect(out / DB_NAME)) as con:
        (cid,) = con.execute("SELECT cell_id FROM cells").fetchone()
    return out, prefix, cid


@pytest.fixture(scope="module")
def pkg(sweep: tuple[Path, str, str], base: Path, home: Path) -> Path:
    res = sweep[0]
    before = _hashes(res)
    cp = qb("package", res, "-o", base / "one.tar.gz", home=home)
    assert cp.returncode == 0, cp.stderr
    assert "KiB" in cp.stdout and "SHA-256" in cp.stdout
    assert _hashes(res) == before, "packaging changed the results folder"
    return base / "one.tar.gz"


def _hashes(root: Path) -> dict[str, str]:
    """Every measured thing of a results folder: the files' bytes, the store's rows
    (SQLite may rewrite its file and WAL without changing a row)."""
    out = {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(DB_NAME) and p.name != "sweep.lock"
    }
    with closing(sqlite3.connect(root / DB_NAME)) as con:
        out[DB_NAME] = hashlib.sha256("\n".join(con.iterdump()).encode()).hexdigest()
    return out


def _unpack(pkg: Path, dest: Path) -> Path:
    with tarfile.open(pkg) as t:
        safe_extract(t, dest, what=str(pkg))
    (top,) = dest.iterdir()
    return top


def _repack(top: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w:gz") as t:
        t.add(top, arcname=top.name)
    return dest


def _fix_checksum(top: Path, rel: str) -> None:
    """Make MANIFEST.json agree with a changed file, as a careful forger would."""
    m = json.loads((top / "MANIFEST.json").read_text())
    data = (top / rel).read_bytes()
    m["files"][rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (top / "MANIFEST.json").write_text(json.dumps(m))


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_package_contents_and_verify(pkg: Path, sweep: tuple[Path, str, str], home: Path) -> None:
    res, _, cid = sweep
    with tarfile.open(pkg) as t:
        names = {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile()}
        manifest = json.load(t.extractfile("one/MANIFEST.json"))  # type: ignore[arg-type]
        prov = json.load(t.extractfile("one/provenance/runs.json"))  # type: ignore[arg-type]
        readme = t.extractfile("one/README.md").read().decode()  # type: ignore[union-attr]
    hars = {p.relative_to(res).as_posix() for p in (res / "hars").rglob("*.har.gz")}
    loads = _stored_loads(res)
    assert len(hars) == loads and {f"results/{h}" for h in hars} <= names
    assert {
        "results/store.sqlite",
        "results/sweep.json",
        f"results/logs/{cid}/1/h3server.jsonl",
        f"results/logs/{cid}/1/access.log",
        "report/index.html",
        "report/table.csv",
        "report/figures.json",
        "report/figures/heatmap-base-0rtt-single-object.svg",
        "data/runs.csv",
        "data/runs.parquet",
        "data/receipts.json",
        "data/cells.json",
        "provenance/package.json",
        "repo/sweeps/demo.yaml",
        "repo/requirements.txt",
        "repo/roles/apache_h2/defaults/main.yml",
        "SHA256SUMS",
        "README.md",
    } <= names
    assert manifest["format"] == 1 and set(manifest["files"]) == names - {"MANIFEST.json"}
    counts = manifest["counts"]
    got = (counts["cells"], counts["attempts"], counts["runs"], counts["hars"])
    assert got == (1, 1, loads, loads)
    # what this quicbed records with every run is all there, nothing is a gap
    rec = prov["recorded"]
    assert not prov["gaps"], prov["gaps"]
    software = rec["software"][0]["value"]
    assert "Chromium" in software["chromium"]["version"]
    # every stack's server is recorded by the digest of its build (the software check's)
    assert len(software["quicbed-h3server"]["sha256"]) == 64
    assert len(software["apache"]["files"]["mod_http2.so"]) == 64
    assert rec["testbed"][0]["value"]["kind"] == "local"
    offloads = rec["nic_offloads"][0]["value"]
    assert offloads and all(v == "off" for f in offloads.values() for v in f.values())
    assert rec["python_packages"][0]["value"]["matplotlib"] == manifest["drawn_with"]["matplotlib"]
    assert "net.ipv4.tcp_congestion_control" in rec["host_sysctls"][0]["value"]
    assert f"quicbed cell --from one.tar.gz --cell {cid}" in readme
    assert "quicbed report results" in readme and "quicbed verify one.tar.gz" in readme

    cp = qb("verify", pkg, home=home)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "verified:" in cp.stdout and "DIFFERS" not in cp.stdout
    assert f"{loads} loads' PLT" in cp.stdout and "byte-equal" in cp.stdout

    # never overwritten unless asked
    again = qb("package", res, "-o", pkg, home=home)
    assert again.returncode == 2 and "--replace" in again.stderr
    assert qb("package", res, "-o", pkg, "--replace", home=home).returncode == 0


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_one_tampered_byte_is_named(pkg: Path, base: Path, home: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=base))
    top = _unpack(pkg, work)
    (log,) = top.glob("results/logs/*/1/h3server.jsonl")
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x01
    log.write_bytes(bytes(data))
    cp = qb("verify", _repack(top, work / "t.tar.gz"), home=home)
    rel = log.relative_to(top).as_posix()
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert f"DIFFERS  {rel}: changed" in cp.stdout and "NOT verified: 1 difference" in cp.stdout

    # one byte flipped in the compressed archive itself
    raw = bytearray(pkg.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (work / "flip.tar.gz").write_bytes(bytes(raw))
    cp = qb("verify", work / "flip.tar.gz", home=home)
    assert cp.returncode in (1, 2), cp.stdout
    assert "not a readable .tar.gz" in cp.stderr or ": changed" in cp.stdout


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_forged_numbers_and_figures_are_recomputed(pkg: Path, base: Path, home: Path) -> None:
    """Checksums made to agree: only recomputing from the runs can catch these."""
    work = Path(tempfile.mkdtemp(dir=base))
    top = _unpack(pkg, work)
    table = (top / "report" / "table.csv").read_text().splitlines()
    head, row = table[0].split(","), table[1].split(",")
    i = head.index("mean_ref")
    row[i] = str(float(row[i]) + 1.0)
    (top / "report" / "table.csv").write_text("\n".join([table[0], ",".join(row)]) + "\n")
    (svg,) = (top / "report" / "figures").glob("*.svg")
    svg.write_text(svg.read_text().replace("</svg>", "<!-- -->\n</svg>"))
    (har,) = top.glob("results/hars/*/1/h3-001.har.gz")
    h = json.loads(gzip.decompress(har.read_bytes()))
    h["log"]["pages"][0]["pageTimings"]["onLoad"] -= 10
    har.write_bytes(gzip.compress(json.dumps(h).encode()))
    for p in ("report/table.csv", svg.relative_to(top).as_posix(), har.relative_to(top).as_posix()):
        _fix_checksum(top, p)
    cp = qb("verify", _repack(top, work / "forged.tar.gz"), home=home)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "DIFFERS  report/table.csv: row" in cp.stdout and "mean_ref: packaged" in cp.stdout
    assert f"DIFFERS  report/figures: {svg.name}: regenerated bytes differ" in cp.stdout
    assert "h3-001.har.gz: plt_ms is" in cp.stdout and "from the HAR" in cp.stdout
    assert "checksums: all" in cp.stdout  # the forger fixed those


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_missing_and_added_files_are_named(pkg: Path, base: Path, home: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=base))
    top = _unpack(pkg, work)
    (har,) = top.glob("results/hars/*/1/h2-002.har.gz")
    har.unlink()
    (top / "results" / "extra.txt").write_text("added later\n")
    cp = qb("verify", _repack(top, work / "m.tar.gz"), home=home)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert f"DIFFERS  {har.relative_to(top).as_posix()}: missing" in cp.stdout
    assert "DIFFERS  results/extra.txt: not listed in MANIFEST.json" in cp.stdout


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_bad_packages_are_clear_errors(pkg: Path, base: Path, home: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=base))
    top = _unpack(pkg, work)
    m = json.loads((top / "MANIFEST.json").read_text())
    m["format"] = 2
    (top / "MANIFEST.json").write_text(json.dumps(m))
    cp = qb("verify", _repack(top, work / "new.tar.gz"), home=home)
    assert cp.returncode == 2
    assert "package format 2, newer than this quicbed reads (1)" in cp.stderr
    (work / "junk.tar.gz").write_text("not an archive")
    cp = qb("verify", work / "junk.tar.gz", home=home)
    assert cp.returncode == 2 and "not a readable .tar.gz" in cp.stderr
    (top / "MANIFEST.json").unlink()
    cp = qb("verify", _repack(top, work / "nomanifest.tar.gz"), home=home)
    assert cp.returncode == 2 and "not a quicbed package (no MANIFEST.json)" in cp.stderr
    cp = qb("verify", work / "absent.tar.gz", home=home)
    assert cp.returncode == 2 and "no such file" in cp.stderr
    cp = qb("verify", work, home=home)
    assert cp.returncode == 2 and "is a folder; give the package file" in cp.stderr


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_refuses_running_sweep_and_non_results(
    sweep: tuple[Path, str, str], base: Path, home: Path
) -> None:
    res = sweep[0]
    with folder_lock(res, "sweep"):
        cp = qb("package", res, "-o", base / "running.tar.gz", home=home)
    assert cp.returncode == 2 and "a sweep is still running into it" in cp.stderr
    assert not (base / "running.tar.gz").exists()
    (base / "empty").mkdir()
    cp = qb("package", base / "empty", home=home)
    assert cp.returncode == 2 and "is not a quicbed results folder" in cp.stderr
    cp = qb("package", res, "-o", base / "one.zip", home=home)
    assert cp.returncode == 2 and "must be a file name ending in .tar.gz" in cp.stderr


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_private_keys_and_tokens_are_refused(
    sweep: tuple[Path, str, str], base: Path, home: Path
) -> None:
    res, _, cid = sweep
    res2 = base / "res-secret"
    shutil.copytree(res, res2)
    logs = res2 / "logs" / cid / "1"
    out = base / "secret.tar.gz"
    key = Ed25519PrivateKey.generate()
    nothing = serialization.NoEncryption()
    openssh = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, nothing
    )
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, nothing
    )

    def refused(why: str, where: Path, **env: str) -> None:
        cp = qb("package", res2, "-o", out, home=env.pop("home", home), **env)
        assert cp.returncode == 2, cp.stdout + cp.stderr
        assert f"refusing to package: {where}: {why}" in cp.stderr, cp.stderr
        assert not out.exists()

    (logs / "id_ed25519").write_bytes(openssh)
    refused("SSH private key file name", logs / "id_ed25519")
    (logs / "id_ed25519").unlink()
    err = logs / "error.log"
    clean = err.read_bytes()
    err.write_bytes(clean + pkcs8)
    refused("private key block", err)
    # a line of the user's own key, without its PEM armour
    user_home = base / "user-home"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_ed25519").write_bytes(openssh)
    body = max(openssh.splitlines(), key=len)
    err.write_bytes(clean + b"\n" + body + b"\n")
    refused("a line of your private key ~/.ssh/id_ed25519", err, home=str(user_home))
    err.write_bytes(clean)
    # a token from the environment, inside a gzipped HAR
    token = secrets.token_hex(20)
    (har,) = res2.glob("hars/*/1/h2-001.har.gz")
    cookie = f'"cookies": [{{"name": "s", "value": "{token}"}}]'.encode()
    har.write_bytes(
        gzip.compress(gzip.decompress(har.read_bytes()).replace(b'"cookies": []', cookie, 1))
    )
    refused("the value of environment variable QB_TEST_API_TOKEN", har, QB_TEST_API_TOKEN=token)


def test_scanner_rules(tmp_path: Path) -> None:
    """Token shapes, SQLite values, and no false alarm on a clean file."""
    gh = "ghp_" + "a1B2" * 9
    db = tmp_path / "x.sqlite"
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("CREATE TABLE t (v TEXT)")
        con.execute("INSERT INTO t VALUES (?)", (json.dumps({"auth": gh}),))
    assert [f.rule for f in scan_file(db, "x.sqlite")] == ["GitHub token"]
    (tmp_path / "a.txt").write_text("key AKIAABCDEFGHIJKLMNOP here")
    assert [f.rule for f in scan_file(tmp_path / "a.txt", "a.txt")] == ["AWS access key ID"]
    (tmp_path / "ok.log").write_text("GET /5kb/ 200 h3 0-RTT spki sha256/AAAA\n")
    assert scan_file(tmp_path / "ok.log", "ok.log") == []
    assert user_needles(tmp_path, {"MY_TOKEN": "short", "PATH": "x" * 40}) == []


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_no_har_package_still_verifies(
    sweep: tuple[Path, str, str], pkg: Path, base: Path, home: Path
) -> None:
    slim = base / "slim.tar.gz"
    cp = qb("package", sweep[0], "-o", slim, "--no-har", home=home)
    assert cp.returncode == 0, cp.stderr
    with tarfile.open(slim) as t:
        assert not [m.name for m in t.getmembers() if "/hars/" in m.name]
        manifest = json.load(t.extractfile("slim/MANIFEST.json"))  # type: ignore[arg-type]
    left = {"path": "results/hars", "why": "--no-har", "count": _stored_loads(sweep[0])}
    assert manifest["left_out"][0] == left
    assert slim.stat().st_size < pkg.stat().st_size
    cp = qb("verify", slim, home=home)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "statistics: 1 cells recomputed" in cp.stdout and "HARs left out" in cp.stdout


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_verify_without_root_or_browser(pkg: Path) -> None:
    """As user nobody, with no PATH at all (so no Chromium, no git): still verified."""
    d = Path(tempfile.mkdtemp(prefix="qb-verify-"))
    try:
        os.chmod(d, 0o777)
        shutil.copyfile(pkg, d / pkg.name)
        os.chmod(d / pkg.name, 0o644)
        env = {"HOME": str(d), "MPLCONFIGDIR": str(d / "mpl"), "TMPDIR": str(d), "PATH": ""}
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to drop root"
        drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
        who = subprocess.run(
            [*drop, "-c", "import os; print(os.geteuid(), os.getegid())"],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        assert who.stdout.split() == ["65534", "65534"], who.stderr
        cp = subprocess.run(
            [*drop, "-m", "quicbed", "verify", str(d / pkg.name)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert "verified:" in cp.stdout
    finally:
        shutil.rmtree(d)


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_rerun_a_cell_from_the_package(
    sweep: tuple[Path, str, str], pkg: Path, base: Path, home: Path
) -> None:
    _, prefix, cid = sweep
    digest = hashlib.sha256(pkg.read_bytes()).hexdigest()
    rerun = base / "rerun"
    cp = qb(
        "cell",
        "--from",
        pkg,
        "--cell",
        cid,
        "--out",
        rerun,
        "--prefix",
        prefix,
        "--receipt-tcp-seconds",
        1,
        home=home,
        timeout=300,
    )
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert f"cell {cid}: packaged attempt 1 (one.tar.gz) beside this rerun, attempt 2" in cp.stdout
    # (the stdout in full: it names every invalid load and why)
    assert "(h2 - h3) / h3: packaged" in cp.stdout and "; rerun " in cp.stdout, cp.stdout
    with closing(sqlite3.connect(rerun / DB_NAME)) as con:
        att = con.execute("SELECT attempt, status FROM attempts WHERE cell_id=?", (cid,)).fetchall()
    assert sorted(att) == [(1, "done"), (2, "done")]
    assert hashlib.sha256(pkg.read_bytes()).hexdigest() == digest, "the package was changed"
    # the rerun folder is reused for the same package, refused for another one
    cp = qb("cell", "--from", pkg, "--cell", "ffffff", "--out", rerun, home=home)
    assert cp.returncode == 2 and "no cell matches 'ffffff'" in cp.stderr
    cp = qb("cell", "--from", pkg, "--cell", cid, "--out", sweep[0], home=home)
    assert cp.returncode == 2 and "is not a rerun folder of one.tar.gz" in cp.stderr
    cp = qb("cell", "--from", base / "absent.tar.gz", "--cell", cid, home=home)
    assert cp.returncode == 2 and "absent.tar.gz: no such file" in cp.stderr
