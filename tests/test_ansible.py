"""The project's Ansible: syntax, lint, and the roles applied to this machine for real.

local.yml (site.yml's server and client plays, this machine playing both, and the ssh
lab) runs here twice, as `make setup` does; the second run must change nothing. The
parts that need a testbed's downloads or FreeBSD are tested with local fixtures: the
archive installs of chromium_client, the Go install of quicbed_binaries (with the real
pinned release from the Go module proxy), and bridge_dummynet's pipe discovery (a fake
ipfw and Emulab delay_mapping files).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml"))
FIND_PIPES = ROOT / "roles" / "bridge_dummynet" / "files" / "quicbed-find-pipes"
ENV = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles")}
PYTHON = "ansible_python_interpreter=/usr/bin/python3"


def _run(argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ENV
    )  # fmt: skip


def _playbook(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return _run([str(BIN / "ansible-playbook"), *args], timeout=timeout)


def _changed(cp: subprocess.CompletedProcess[str]) -> int:
    recap = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", cp.stdout)
    assert recap, cp.stdout[-2000:]
    return int(recap.group(1))


def _changed_lines(cp: subprocess.CompletedProcess[str]) -> str:
    out = cp.stdout.splitlines()
    return "\n".join(
        f"{out[i - 2] if i >= 2 else ''} {line}" for i, line in enumerate(out)
        if line.startswith("changed")
    )  # fmt: skip


def _inventory(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(textwrap.dedent(text))
    return path


def _local_play(tmp_path: Path, tasks: str) -> Path:
    """A one-play playbook on this machine (connection local) with these tasks."""
    path = tmp_path / "play.yml"
    path.write_text(
        "- name: Role tasks under test\n  hosts: localhost\n  connection: local\n"
        "  gather_facts: true\n  vars:\n    ansible_python_interpreter: /usr/bin/python3\n"
        "  tasks:\n" + textwrap.indent(textwrap.dedent(tasks), "    ")
    )
    return path


# --- syntax and lint -------------------------------------------------------------


def test_syntax_check_every_playbook(tmp_path: Path) -> None:
    """Every playbook parses against an inventory with the testbed's three groups."""
    inv = _inventory(tmp_path, """
        [server]
        node-server ansible_host=192.0.2.1
        [client]
        node-client ansible_host=192.0.2.2
        [bridge]
        node-bridge ansible_host=192.0.2.3
    """)  # fmt: skip
    assert {p.name for p in PLAYBOOKS} >= {"site.yml", "local.yml"}
    for pb in PLAYBOOKS:
        cp = _playbook("-i", str(inv), "--syntax-check", str(pb))
        assert cp.returncode == 0, cp.stdout + cp.stderr


def test_ansible_lint_production_profile() -> None:
    cp = _run([str(BIN / "ansible-lint"), "--profile", "production", "playbooks", "roles"])
    assert cp.returncode == 0, cp.stdout + cp.stderr


# --- site.yml on this machine ----------------------------------------------------

LOCAL_INVENTORY = """
    [server]
    localhost ansible_connection=local
    [client]
    localhost ansible_connection=local
"""


def test_site_refuses_a_run_without_quic_version(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, LOCAL_INVENTORY)
    cp = _playbook("-i", str(inv), "playbooks/site.yml")
    assert cp.returncode != 0
    assert "set quicbed_quic_version to RFCv1" in cp.stdout, cp.stdout[-2000:]
    assert _changed(cp) == 0


def test_site_q037_stops_at_once_naming_what_is_missing(root: None, tmp_path: Path) -> None:
    """The gQUIC roles are placeholders: they must fail first, before changing anything."""
    inv = _inventory(tmp_path, LOCAL_INVENTORY)
    cp = _playbook("-i", str(inv), "playbooks/site.yml", "-e", "quicbed_quic_version=Q037")
    assert cp.returncode != 0
    assert "quic_server_gquic is not implemented" in cp.stdout, cp.stdout[-3000:]
    assert "Google Cloud Storage" in cp.stdout
    assert _changed(cp) == 0


def test_local_playbook_is_idempotent(root: None) -> None:
    """The whole local playbook as `make setup` runs it, twice; the second changes nothing.

    local.yml is site.yml's server and client plays (quic_server_google skipped: its
    build fetches quiche from GitHub and Bazel from Bazel's release site, which this
    machine cannot reach, and takes an hour) plus the ssh lab's sshd. The Go binaries
    are rebuilt on every run; they are reproducible, so the rebuild installs nothing; the
    quiche server's cargo build is cached and reports nothing new. The same two runs on
    a fresh Debian root: tests/test_fresh_machine.py.
    """
    argv = ["-i", "localhost,", "playbooks/local.yml"]  # exactly the Makefile's
    assert f"$(ANSIBLE) {' '.join(argv)}" in (ROOT / "Makefile").read_text()
    first = _playbook(*argv)
    assert first.returncode == 0, first.stdout[-3000:]
    assert "quic_server_google_enabled is false" in first.stdout
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (ROOT / "build" / "bin").glob("quicbed-*")}  # fmt: skip
    assert set(sums) == {"quicbed-linkem", "quicbed-h3server", "quicbed-quiche-server"}
    second = _playbook(*argv)
    assert second.returncode == 0, second.stdout[-3000:]
    assert _changed(second) == 0, "second run changed something:\n" + _changed_lines(second)
    assert "Build the binaries into the scratch directory" in second.stdout  # really rebuilt
    assert sums == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in (ROOT / "build" / "bin").glob("quicbed-*")}  # fmt: skip
    assert shutil.which("chromium") and shutil.which("iperf3") and shutil.which("node")
    assert (ROOT / "client" / "node_modules" / "chrome-har-capturer").is_dir()


# --- ssh_lab: sshd for the ssh lab, never a system sshd -------------------------


def test_ssh_lab_marks_a_new_sshd_not_to_be_run(root: None, tmp_path: Path) -> None:
    """Where there was no sshd before, Debian's "do not run" marker is written first;
    where there was one, the machine is left as it was. Twice: the second run changes
    nothing. (The "no sshd before" case is made by pointing the role's probe at a path
    that does not exist, with the marker in a scratch folder.)"""
    marker = tmp_path / "sshd_not_to_be_run"
    fresh = _local_play(
        tmp_path,
        f"""
        - name: The role as on a machine without sshd
          ansible.builtin.include_role:
            name: ssh_lab
          vars:
            ssh_lab_sshd: {tmp_path / "no-sshd"}
            ssh_lab_not_to_be_run: {marker}
    """,
    )
    first = _playbook("-i", "localhost,", str(fresh))
    assert first.returncode == 0, first.stdout[-3000:]
    assert "ssh_lab_not_to_be_run" not in marker.read_text() and "ssh_lab" in marker.read_text()
    assert Path("/usr/sbin/sshd").exists()
    existing = tmp_path / "existing.yml"
    existing.write_text(fresh.read_text().replace(str(tmp_path / "no-sshd"), "/usr/sbin/sshd")
                        .replace(str(marker), str(tmp_path / "untouched")))  # fmt: skip
    for _ in range(2):
        again = _playbook("-i", "localhost,", str(existing))
        assert again.returncode == 0, again.stdout[-3000:]
        assert _changed(again) == 0, _changed_lines(again)
    assert not (tmp_path / "untouched").exists()


# --- quicbed_binaries: the Go release a fresh node gets --------------------------


def test_go_install_of_the_pinned_release(root: None, tmp_path: Path) -> None:
    """The real pinned toolchain from the Go module proxy, into a scratch Go root.

    Its SHA-256 is checked by the role; the download is kept in /var/cache/quicbed.
    """
    play = _local_play(tmp_path, """
        - name: Install Go as on a fresh node
          ansible.builtin.include_role:
            name: quicbed_binaries
            tasks_from: go
    """)  # fmt: skip
    argv = ["-i", "localhost,", str(play), "-e", f"quicbed_binaries_go_root={tmp_path}/go",
            "-e", f"quicbed_binaries_go_unpack_dir={tmp_path}/unpack"]  # fmt: skip
    first = _playbook(*argv)
    assert first.returncode == 0, first.stdout[-3000:]
    second = _playbook(*argv)
    assert second.returncode == 0, second.stdout[-3000:]
    assert _changed(second) == 0, _changed_lines(second)
    out = subprocess.run([tmp_path / "go" / "bin" / "go", "version"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert "go1.26.8 linux/amd64" in out


# --- chromium_client: the Ubuntu path (Chrome for Testing, nodejs.org Node) -------

CFT_VERSION = "141.0.7390.54"
NODE_VERSION = "20.20.2"


def _zip(path: Path, member: str, data: bytes) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo(member)
        info.external_attr = 0o100755 << 16
        zf.writestr(info, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _node_tarball(path: Path, version: str) -> str:
    with tarfile.open(path, "w:xz") as tf:
        for name in ("node", "npm", "npx"):
            data = f"#!/bin/sh\necho v{version}\n".encode()
            info = tarfile.TarInfo(f"node-v{version}-linux-x64/bin/{name}")
            info.size, info.mode = len(data), 0o755
            tf.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _archive_play(tmp_path: Path, zip_path: Path, zip_sha: str, version: str = CFT_VERSION):
    tar = tmp_path / f"node-v{NODE_VERSION}-linux-x64.tar.xz"
    tar_sha = _node_tarball(tar, NODE_VERSION)
    play = _local_play(tmp_path, """
        - name: Chrome for Testing as on Ubuntu
          ansible.builtin.include_role:
            name: chromium_client
            tasks_from: chrome_for_testing
        - name: Node as on Ubuntu
          ansible.builtin.include_role:
            name: chromium_client
            tasks_from: node_tarball
    """)  # fmt: skip
    ev = {
        "chromium_client_cft_version": version, "chromium_client_cft_url": f"file://{zip_path}",
        "chromium_client_cft_sha256": zip_sha, "chromium_client_node_version": NODE_VERSION,
        "chromium_client_node_url": f"file://{tar}", "chromium_client_node_sha256": tar_sha,
        "chromium_client_install_dir": str(tmp_path / "opt"),
        "chromium_client_bin_dir": str(tmp_path / "bin"),
        "chromium_client_download_dir": str(tmp_path / "cache"),
    }  # fmt: skip
    return ["-i", "localhost,", str(play), "-e", json.dumps(ev)]


def test_chromium_client_archive_installs(root: None, tmp_path: Path) -> None:
    """Download with checksum, unpack, link, ldd and version checks; then idempotent."""
    fake_chrome = f'#!/bin/sh\necho "Google Chrome for Testing {CFT_VERSION} "\n'.encode()
    zip_path = tmp_path / "chrome-linux64.zip"
    argv = _archive_play(tmp_path, zip_path, _zip(zip_path, "chrome-linux64/chrome", fake_chrome))
    first = _playbook(*argv)
    assert first.returncode == 0, first.stdout[-3000:]
    second = _playbook(*argv)
    assert second.returncode == 0, second.stdout[-3000:]
    assert _changed(second) == 0, _changed_lines(second)
    chromium = subprocess.run([tmp_path / "bin" / "chromium", "--version"], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    assert CFT_VERSION in chromium
    node_tree = (tmp_path / "bin" / "npm").resolve().parent.parent
    assert node_tree.name == f"node-v{NODE_VERSION}-linux-x64"


def test_chromium_client_refuses_a_wrong_checksum(root: None, tmp_path: Path) -> None:
    zip_path = tmp_path / "chrome-linux64.zip"
    _zip(zip_path, "chrome-linux64/chrome", b"#!/bin/sh\n")
    cp = _playbook(*_archive_play(tmp_path, zip_path, "0" * 64))
    assert cp.returncode != 0
    assert "did not match" in cp.stdout, cp.stdout[-3000:]
    assert not (tmp_path / "bin" / "chromium").exists()


@pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler to make a broken ELF")
def test_chromium_client_names_missing_libraries(root: None, tmp_path: Path) -> None:
    """A browser whose libraries do not resolve (as Chrome on a too-old glibc) stops the role."""
    src = tmp_path / "lib.c"
    src.write_text("int quicbed_f(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libqbmissing.so", src], check=True)
    main = tmp_path / "main.c"
    main.write_text("int quicbed_f(void);\nint main(void) { return quicbed_f(); }\n")
    elf = tmp_path / "chrome"
    subprocess.run(["cc", "-o", elf, main, f"-L{tmp_path}", "-lqbmissing"], check=True)
    (tmp_path / "libqbmissing.so").unlink()
    zip_path = tmp_path / "chrome-linux64.zip"
    cp = _playbook(*_archive_play(tmp_path, zip_path, _zip(zip_path, "chrome-linux64/chrome",
                                                           elf.read_bytes())))  # fmt: skip
    assert cp.returncode != 0
    assert "cannot run here; missing: libqbmissing.so => not found" in cp.stdout, cp.stdout[-3000:]


# --- bridge_dummynet: pipe discovery (Emulab's delay_mapping, ipfw) ----------------

PIPE_SHOW = """\
60110:  10.000 Mbit/s   15 ms burst 0
q191182  50 sl. 0 flows (1 buckets) sched 125646 weight 0 lmax 0 pri 0 droptail
 sched 125646 type FIFO flags 0x0 0 buckets 0 active
60120:  10.000 Mbit/s   15 ms burst 0
q191183  50 sl. 0 flows (1 buckets) sched 125647 weight 0 lmax 0 pri 0 droptail
"""
RULES = """\
60110 pipe 60110 ip from any to any out recv mce1
60120 pipe 60120 ip from any to any out recv mce0
65534 allow ip from any to any
"""


def _fake_ipfw(tmp_path: Path, pipe_show: str = PIPE_SHOW, rules: str = RULES) -> Path:
    (tmp_path / "pipe-show.txt").write_text(pipe_show)
    (tmp_path / "list.txt").write_text(rules)
    ipfw = tmp_path / "ipfw"
    ipfw.write_text(
        "#!/bin/sh\n"
        f'case "$1" in pipe) cat {tmp_path}/pipe-show.txt;; list) cat {tmp_path}/list.txt;;'
        " *) exit 64;; esac\n"
    )
    ipfw.chmod(0o755)
    return ipfw


def _find_pipes(tmp_path: Path, mapping: str | None, *extra: str, **ipfw: str):
    path = tmp_path / "delay_mapping"
    if mapping is not None:
        path.write_text(mapping)
    argv = [sys.executable, str(FIND_PIPES), "--mapping", str(path),
            "--ipfw", str(_fake_ipfw(tmp_path, **ipfw)), *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("mapping", "extra", "down", "up"),
    [
        # Emulab's line: <link> duplex <vnode0> <vnode1> <iface0> <iface1> <pipe0> <pipe1>;
        # pipe0 shapes what enters on iface0, i.e. what vnode0's side sends.
        ("link duplex server client mce1 mce0 60110 60120\n", [], (60110, "mce1"), (60120, "mce0")),
        ("link duplex client server mce0 mce1 60120 60110\n", [], (60110, "mce1"), (60120, "mce0")),
        # only the client is named (Emulab prints foo/bar for unknown vnodes)
        ("link duplex client bar mce0 mce1 60120 60110\n", [], (60110, "mce1"), (60120, "mce0")),
        # names that say nothing: the interface facing the server decides
        ("link duplex foo bar mce0 mce1 60120 60110\n", ["--server-iface", "mce1"],
         (60110, "mce1"), (60120, "mce0")),
        # two shaped links: pick one by name
        ("other duplex a b em0 em1 60130 60140\nlink duplex server client mce1 mce0 60110 60120\n",
         ["--link", "link"], (60110, "mce1"), (60120, "mce0")),
        # no delay_mapping: the pipe rules of `ipfw list`
        (None, ["--server-iface", "mce1"], (60110, "mce1"), (60120, "mce0")),
    ],
)  # fmt: skip
def test_find_pipes(tmp_path: Path, mapping, extra, down, up) -> None:
    cp = _find_pipes(tmp_path, mapping, *extra)
    assert cp.returncode == 0, cp.stderr
    got = json.loads(cp.stdout)
    assert list(got) == ["format", "link", "pipes", "interfaces", "source"]
    assert got["format"] == 1
    assert (got["pipes"]["down"], got["interfaces"]["down"]) == down
    assert (got["pipes"]["up"], got["interfaces"]["up"]) == up
    if mapping is None:
        assert (got["source"], got["link"]) == ("ipfw list", "")
    else:
        assert (got["source"], got["link"]) == (str(tmp_path / "delay_mapping"), "link")


@pytest.mark.parametrize(
    ("mapping", "extra", "ipfw", "message"),
    [
        ("link duplex server client mce1 mce0 60110 60120\n", [], {"pipe_show": ""},
         "Dummynet has no pipes"),
        ("link duplex foo bar mce0 mce1 60120 60110\n", [], {},
         "cannot tell which side is the server"),
        ("a duplex server client e0 e1 1 2\nb duplex server client e2 e3 3 4\n", [], {},
         "lists several links (a, b)"),
        ("link duplex server client mce1 mce0 60150 60160\n", [], {},
         "Dummynet has no pipe 60150, 60160"),
        ("link duplex server client mce1 mce0 60110 60120\n", ["--server-iface", "em9"], {},
         "--server-iface em9 is neither"),
        (None, [], {"rules": "65534 allow ip from any to any\n"}, "no delay_mapping file"),
        ("garbage\n", [], {}, "not a delay_mapping line"),
    ],
)  # fmt: skip
def test_find_pipes_names_what_is_missing(tmp_path: Path, mapping, extra, ipfw, message) -> None:
    cp = _find_pipes(tmp_path, mapping, *extra, **ipfw)
    assert cp.returncode == 2
    assert message in cp.stderr, cp.stderr
    assert cp.stdout == ""


def test_find_pipes_without_ipfw(tmp_path: Path) -> None:
    path = tmp_path / "delay_mapping"
    path.write_text("link duplex server client mce1 mce0 60110 60120\n")
    cp = subprocess.run([sys.executable, str(FIND_PIPES), "--mapping", str(path), "--ipfw",
                         str(tmp_path / "no-ipfw")], capture_output=True, text=True)  # fmt: skip
    assert cp.returncode == 2
    assert "is this the FreeBSD bridge node?" in cp.stderr


def test_bridge_pipes_tasks_write_the_contract(tmp_path: Path) -> None:
    """The role's discovery tasks (installed finder, pipes.json) run here against fixtures."""
    mapping = tmp_path / "delay_mapping"
    mapping.write_text("link duplex client server mce0 mce1 60120 60110\n")
    play = _local_play(tmp_path, """
        - name: Discover the pipes as on the bridge
          ansible.builtin.include_role:
            name: bridge_dummynet
            tasks_from: pipes
    """)  # fmt: skip
    ev = {"bridge_dummynet_delay_mapping": str(mapping),
          "bridge_dummynet_ipfw": str(_fake_ipfw(tmp_path)),
          "bridge_dummynet_libexec_dir": str(tmp_path / "libexec"),
          "bridge_dummynet_pipes_file": str(tmp_path / "db" / "pipes.json")}  # fmt: skip
    argv = ["-i", "localhost,", str(play), "-e", json.dumps(ev)]
    first = _playbook(*argv)
    assert first.returncode == 0, first.stdout[-3000:]
    text = (tmp_path / "db" / "pipes.json").read_text()
    assert text.startswith('{\n  "format": 1,\n  "link": "link",'), text  # the finder's own text
    assert json.loads(text) == {
        "format": 1, "link": "link", "pipes": {"down": 60110, "up": 60120},
        "interfaces": {"down": "mce1", "up": "mce0"}, "source": str(mapping),
    }  # fmt: skip
    second = _playbook(*argv)
    assert second.returncode == 0 and _changed(second) == 0, _changed_lines(second)
    (tmp_path / "pipe-show.txt").write_text("")  # a bridge without shaping
    third = _playbook(*argv)
    assert third.returncode != 0
    assert "Dummynet has no pipes" in third.stdout, third.stdout[-3000:]
