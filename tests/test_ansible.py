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
import http.server
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import textwrap
import threading
import urllib.parse
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
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ENV)


def _playbook(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return _run([str(BIN / "ansible-playbook"), *args], timeout=timeout)


def _changed(cp: subprocess.CompletedProcess[str]) -> int:
    recap = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", cp.stdout)
    assert recap, cp.stdout[-2000:]
    return int(recap.group(1))


def _changed_lines(cp: subprocess.CompletedProcess[str]) -> str:
    out = cp.stdout.splitlines()
    return "\n".join(
        f"{out[i - 2] if i >= 2 else ''} {line}"
        for i, line in enumerate(out)
        if line.startswith("changed")
    )


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


@pytest.mark.slow
def test_syntax_check_every_playbook(tmp_path: Path) -> None:
    """Every playbook parses against an inventory with the testbed's three groups."""
    inv = _inventory(
        tmp_path,
        """
        [server]
        node-server ansible_host=192.0.2.1
        [client]
        node-client ansible_host=192.0.2.2
        [bridge]
        node-bridge ansible_host=192.0.2.3
    """,
    )
    assert {p.name for p in PLAYBOOKS} >= {"site.yml", "local.yml"}
    for pb in PLAYBOOKS:
        cp = _playbook("-i", str(inv), "--syntax-check", str(pb))
        assert cp.returncode == 0, cp.stdout + cp.stderr


def test_roles_and_playbooks_use_ansible_builtin_only() -> None:
    """The set-up installs ansible-core alone (requirements.txt, scripts/bootstrap.sh): a
    module or plugin of a collection would be missing there, found only when its task
    runs. Named here first, file and line."""
    fqcn = re.compile(r"^\s*-?\s*([a-z0-9_]+)\.([a-z0-9_]+)\.[a-z0-9_]+:", re.M)
    other = []
    for path in sorted([*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/**/*.yml")]):
        text = path.read_text()
        for m in fqcn.finditer(text):
            if (m.group(1), m.group(2)) != ("ansible", "builtin"):
                line = text.count("\n", 0, m.start()) + 1
                other.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0).strip()}")
    assert other == [], "\n".join(other)


@pytest.mark.slow
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


@pytest.mark.root
@pytest.mark.parallel  # applies roles to scratch copies: times nothing
@pytest.mark.slow
def test_site_refuses_a_run_without_quic_version(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, LOCAL_INVENTORY)
    cp = _playbook("-i", str(inv), "playbooks/site.yml")
    assert cp.returncode != 0
    assert "set quicbed_quic_version to RFCv1" in cp.stdout, cp.stdout[-2000:]
    assert _changed(cp) == 0


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
def test_site_q037_stops_at_once_naming_what_is_missing(root: None, tmp_path: Path) -> None:
    """The gQUIC roles are placeholders: they must fail first, before changing anything."""
    inv = _inventory(tmp_path, LOCAL_INVENTORY)
    cp = _playbook("-i", str(inv), "playbooks/site.yml", "-e", "quicbed_quic_version=Q037")
    assert cp.returncode != 0
    assert "quic_server_gquic is not implemented" in cp.stdout, cp.stdout[-3000:]
    assert "Google Cloud Storage" in cp.stdout
    assert _changed(cp) == 0


# The local playbook's idempotence (a second `make setup` changes nothing, the Go
# binaries rebuilt to the same bytes, the set of binaries, the tools installed) is
# checked once, on a fresh Debian root: tests/test_fresh_machine.py.


# --- ssh_lab: sshd for the ssh lab, never a system sshd -------------------------


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
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
    existing.write_text(
        fresh.read_text()
        .replace(str(tmp_path / "no-sshd"), "/usr/sbin/sshd")
        .replace(str(marker), str(tmp_path / "untouched"))
    )
    for _ in range(2):
        again = _playbook("-i", "localhost,", str(existing))
        assert again.returncode == 0, again.stdout[-3000:]
        assert _changed(again) == 0, _changed_lines(again)
    assert not (tmp_path / "untouched").exists()


# --- quicbed_binaries: the Go release a fresh node gets --------------------------


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
def test_go_install_of_the_pinned_release(root: None, tmp_path: Path) -> None:
    """The real pinned toolchain from the Go module proxy, into a scratch Go root.

    Its SHA-256 is checked by the role; the download is kept in /var/cache/quicbed.
    """
    play = _local_play(
        tmp_path,
        """
        - name: Install Go as on a fresh node
          ansible.builtin.include_role:
            name: quicbed_binaries
            tasks_from: go
    """,
    )
    argv = [
        "-i",
        "localhost,",
        str(play),
        "-e",
        f"quicbed_binaries_go_root={tmp_path}/go",
        "-e",
        f"quicbed_binaries_go_unpack_dir={tmp_path}/unpack",
    ]
    first = _playbook(*argv)
    assert first.returncode == 0, first.stdout[-3000:]
    second = _playbook(*argv)
    assert second.returncode == 0, second.stdout[-3000:]
    assert _changed(second) == 0, _changed_lines(second)
    out = subprocess.run(
        [tmp_path / "go" / "bin" / "go", "version"], capture_output=True, text=True, check=True
    ).stdout
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
    play = _local_play(
        tmp_path,
        """
        - name: Chrome for Testing as on Ubuntu
          ansible.builtin.include_role:
            name: chromium_client
            tasks_from: chrome_for_testing
        - name: Node as on Ubuntu
          ansible.builtin.include_role:
            name: chromium_client
            tasks_from: node_tarball
    """,
    )
    ev = {
        "chromium_client_cft_version": version,
        "chromium_client_cft_url": f"file://{zip_path}",
        "chromium_client_cft_sha256": zip_sha,
        "chromium_client_node_version": NODE_VERSION,
        "chromium_client_node_url": f"file://{tar}",
        "chromium_client_node_sha256": tar_sha,
        "chromium_client_install_dir": str(tmp_path / "opt"),
        "chromium_client_bin_dir": str(tmp_path / "bin"),
        "chromium_client_download_dir": str(tmp_path / "cache"),
    }
    return ["-i", "localhost,", str(play), "-e", json.dumps(ev)]


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
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
    chromium = subprocess.run(
        [tmp_path / "bin" / "chromium", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert CFT_VERSION in chromium
    node_tree = (tmp_path / "bin" / "npm").resolve().parent.parent
    assert node_tree.name == f"node-v{NODE_VERSION}-linux-x64"


# --- firefox_client: Debian's firefox-esr and the BiDi driver's locked ws ----------------


def _firefox_play(tmp_path: Path, **variables: str) -> list[str]:
    """firefox_client on this machine, its driver installed into a copy of client/firefox
    (so the checkout's own node_modules is never touched)."""
    repo = tmp_path / "repo"
    (repo / "client" / "firefox").mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / "client" / "firefox" / name, repo / "client" / "firefox" / name)
    play = tmp_path / "firefox.yml"
    play.write_text(
        "- name: firefox_client alone\n  hosts: localhost\n  connection: local\n"
        "  gather_facts: true\n  roles:\n    - role: firefox_client\n"
    )
    extra = {"firefox_client_repo_dir": str(repo), **variables}
    return ["-i", "localhost,", "-e", PYTHON, "-e", json.dumps(extra), str(play)]


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
def test_firefox_client_installs_then_changes_nothing(root: None, tmp_path: Path) -> None:
    """Firefox ESR from the archive, the driver's ws exactly as locked (npm ci, which
    checks its sha512); a second run changes nothing; a pin that is the installed package
    passes, another is refused by apt naming it, and nothing is changed."""
    first = _playbook(*_firefox_play(tmp_path))
    assert first.returncode == 0, first.stdout[-3000:]
    assert _changed(first) >= 1  # npm ci into the copy
    ws = json.loads((tmp_path / "repo/client/firefox/node_modules/ws/package.json").read_text())
    lock = json.loads((ROOT / "client/firefox/package-lock.json").read_text())
    assert ws["version"] == lock["packages"]["node_modules/ws"]["version"]
    second = _playbook(*_firefox_play(tmp_path))
    assert second.returncode == 0, second.stdout[-3000:]
    assert _changed(second) == 0, _changed_lines(second)
    assert "Mozilla Firefox" in second.stdout and "esr" in second.stdout
    installed = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "firefox-esr"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pinned = _playbook(*_firefox_play(tmp_path, firefox_client_version=installed))
    assert pinned.returncode == 0 and _changed(pinned) == 0, pinned.stdout[-3000:]
    wrong = _playbook(*_firefox_play(tmp_path, firefox_client_version="1.0esr-0quicbed"))
    assert wrong.returncode != 0
    assert "1.0esr-0quicbed" in wrong.stdout and _changed(wrong) == 0, wrong.stdout[-3000:]


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
def test_chromium_client_refuses_a_wrong_checksum(root: None, tmp_path: Path) -> None:
    zip_path = tmp_path / "chrome-linux64.zip"
    _zip(zip_path, "chrome-linux64/chrome", b"#!/bin/sh\n")
    cp = _playbook(*_archive_play(tmp_path, zip_path, "0" * 64))
    assert cp.returncode != 0
    assert "did not match" in cp.stdout, cp.stdout[-3000:]
    assert not (tmp_path / "bin" / "chromium").exists()


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
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
    cp = _playbook(
        *_archive_play(
            tmp_path, zip_path, _zip(zip_path, "chrome-linux64/chrome", elf.read_bytes())
        )
    )
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
    argv = [
        sys.executable,
        str(FIND_PIPES),
        "--mapping",
        str(path),
        "--ipfw",
        str(_fake_ipfw(tmp_path, **ipfw)),
        *extra,
    ]
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
        (
            "link duplex foo bar mce0 mce1 60120 60110\n",
            ["--server-iface", "mce1"],
            (60110, "mce1"),
            (60120, "mce0"),
        ),
        # two shaped links: pick one by name
        (
            "other duplex a b em0 em1 60130 60140\n"
            "link duplex server client mce1 mce0 60110 60120\n",
            ["--link", "link"],
            (60110, "mce1"),
            (60120, "mce0"),
        ),
        # no delay_mapping: the pipe rules of `ipfw list`
        (None, ["--server-iface", "mce1"], (60110, "mce1"), (60120, "mce0")),
    ],
)
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
        (
            "link duplex server client mce1 mce0 60110 60120\n",
            [],
            {"pipe_show": ""},
            "Dummynet has no pipes",
        ),
        (
            "link duplex foo bar mce0 mce1 60120 60110\n",
            [],
            {},
            "cannot tell which side is the server",
        ),
        (
            "a duplex server client e0 e1 1 2\nb duplex server client e2 e3 3 4\n",
            [],
            {},
            "lists several links (a, b)",
        ),
        (
            "link duplex server client mce1 mce0 60150 60160\n",
            [],
            {},
            "Dummynet has no pipe 60150, 60160",
        ),
        (
            "link duplex server client mce1 mce0 60110 60120\n",
            ["--server-iface", "em9"],
            {},
            "--server-iface em9 is neither",
        ),
        (None, [], {"rules": "65534 allow ip from any to any\n"}, "no delay_mapping file"),
        ("garbage\n", [], {}, "not a delay_mapping line"),
    ],
)
def test_find_pipes_names_what_is_missing(tmp_path: Path, mapping, extra, ipfw, message) -> None:
    cp = _find_pipes(tmp_path, mapping, *extra, **ipfw)
    assert cp.returncode == 2
    assert message in cp.stderr, cp.stderr
    assert cp.stdout == ""


def test_find_pipes_without_ipfw(tmp_path: Path) -> None:
    path = tmp_path / "delay_mapping"
    path.write_text("link duplex server client mce1 mce0 60110 60120\n")
    cp = subprocess.run(
        [
            sys.executable,
            str(FIND_PIPES),
            "--mapping",
            str(path),
            "--ipfw",
            str(tmp_path / "no-ipfw"),
        ],
        capture_output=True,
        text=True,
    )
    assert cp.returncode == 2
    assert "is this the FreeBSD bridge node?" in cp.stderr


@pytest.mark.slow
def test_bridge_pipes_tasks_write_the_contract(tmp_path: Path) -> None:
    """The role's discovery tasks (installed finder, pipes.json) run here against fixtures."""
    mapping = tmp_path / "delay_mapping"
    mapping.write_text("link duplex client server mce0 mce1 60120 60110\n")
    play = _local_play(
        tmp_path,
        """
        - name: Discover the pipes as on the bridge
          ansible.builtin.include_role:
            name: bridge_dummynet
            tasks_from: pipes
    """,
    )
    ev = {
        "bridge_dummynet_delay_mapping": str(mapping),
        "bridge_dummynet_ipfw": str(_fake_ipfw(tmp_path)),
        "bridge_dummynet_libexec_dir": str(tmp_path / "libexec"),
        "bridge_dummynet_pipes_file": str(tmp_path / "db" / "pipes.json"),
    }
    argv = ["-i", "localhost,", str(play), "-e", json.dumps(ev)]
    first = _playbook(*argv)
    assert first.returncode == 0, first.stdout[-3000:]
    text = (tmp_path / "db" / "pipes.json").read_text()
    assert text.startswith('{\n  "format": 1,\n  "link": "link",'), text  # the finder's own text
    assert json.loads(text) == {
        "format": 1,
        "link": "link",
        "pipes": {"down": 60110, "up": 60120},
        "interfaces": {"down": "mce1", "up": "mce0"},
        "source": str(mapping),
    }
    second = _playbook(*argv)
    assert second.returncode == 0 and _changed(second) == 0, _changed_lines(second)
    (tmp_path / "pipe-show.txt").write_text("")  # a bridge without shaping
    third = _playbook(*argv)
    assert third.returncode != 0
    assert "Dummynet has no pipes" in third.stdout, third.stdout[-3000:]


# --- the gQUIC arm on the testbed: Q037 (proto-quic, Chromium 60), Q046 (QUICHE) ----

THREE_GROUPS = """
    [server]
    node-server ansible_host=192.0.2.1
    [client]
    node-client ansible_host=192.0.2.2
    [bridge]
    node-bridge ansible_host=192.0.2.3
"""


@pytest.mark.slow
def test_site_q037_lists_the_gquic_build_and_the_chromium60_tasks(tmp_path: Path) -> None:
    """site.yml for Q037 renders every task of the Q037 server and client (imported, so
    --list-tasks shows them; chromium_client's Node, an include_role, is not listed), in
    order: the platform checks first, the server's check
    of Q037 after its build, and Chromium 60 before the Chromium 72 tasks."""
    inv = _inventory(tmp_path, THREE_GROUPS)
    cp = _playbook(
        "-i", str(inv), "playbooks/site.yml", "-e", "quicbed_quic_version=Q037", "--list-tasks"
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr
    lines = [line.strip().split("\t")[0] for line in cp.stdout.splitlines()]
    server = [x.split(" : ", 1)[1] for x in lines if x.startswith("quic_server_gquic : ")]
    assert server[0] == "Refuse any platform but Ubuntu 18.04 on x86-64"
    for name in (
        "Check out the pinned proto-quic commit (about 1 GB)",
        "Download the Debian jessie amd64 sysroot (chrome-linux-sysroot bucket)",
        "Build quic_server and quic_client (ninja; tens of minutes)",
        "Record what was built, from what, and how long it took",
        "Point the stable paths at this build",
        "Require the answer",
    ):
        assert name in server, name
    assert server.index("Require the answer") > server.index("Point the stable paths at this build")
    client = [x.split(" : ", 1)[1] for x in lines if x.startswith("chromium_client_gquic : ")]
    assert client[0] == "Refuse any platform but Ubuntu 18.04 on x86-64 for the Q037 client"
    first72 = client.index("Load the OS's package names (most specific vars file first)")
    for name in (
        "Install the page-load driver's dependencies exactly as locked (as chromium_client does)",
        "Ask Launchpad for the published files and their SHA-256",
        "Download each .deb (checked by that SHA-256)",
        "Put it on PATH as chromium60 (on the Xvfb display unless DISPLAY is set)",
        "Refuse a browser with missing libraries",
        "Start it now and at boot",
        "Run Chromium 60 on the display for 10 s (it must still be running then)",
    ):
        assert client.index(name) < first72, name


@pytest.mark.slow
def test_quic_server_gquic_build_paths_and_gn_args_render(tmp_path: Path) -> None:
    """The role's derived values for both toolchains: one install directory per
    commit, toolchain and gn arguments; host adds its five arguments; the check asks
    for version 37."""
    roles = ROOT / "roles" / "quic_server_gquic"
    play = tmp_path / "render.yml"
    play.write_text(
        textwrap.dedent(f"""
        - name: Render quic_server_gquic's values
          hosts: localhost
          gather_facts: false
          vars_files: ["{roles}/defaults/main.yml", "{roles}/vars/main.yml"]
          tasks:
            - name: Show them
              ansible.builtin.debug:
                msg: "RENDER{{{{ {{'dir': __quic_server_gquic_install_dir,
                  'args': __quic_server_gquic_args,
                  'v': quic_server_gquic_version | regex_replace('^QUIC_VERSION_0*', '')}}
                  | to_json }}}}"
    """)
    )
    out = {}
    for toolchain in ("bundled", "host"):
        cp = _playbook(
            "-i",
            "localhost,",
            "-c",
            "local",
            str(play),
            "-e",
            f"quic_server_gquic_toolchain={toolchain}",
        )
        assert cp.returncode == 0, cp.stdout[-2000:]
        m = re.search(r'"msg": "RENDER(.*)"', cp.stdout)
        assert m, cp.stdout[-2000:]
        out[toolchain] = json.loads(m.group(1).encode().decode("unicode_escape"))
    base = ["is_debug = false", "is_component_build = false", "symbol_level = 1"]
    assert out["bundled"]["args"] == base
    assert out["host"]["args"] == [
        *base,
        "use_sysroot = false",
        "linux_use_bundled_binutils = false",
        "use_gold = false",
        "treat_warnings_as_errors = false",
        "fatal_linker_warnings = false",
    ]
    for toolchain, o in out.items():
        assert re.fullmatch(
            rf"/opt/quicbed/proto-quic-9f1ab92724ce-{toolchain}-[0-9a-f]{{8}}", o["dir"]
        ), o
        assert o["v"] == "37"
    assert out["bundled"]["dir"][-8:] != out["host"]["dir"][-8:]


def _stub_quic_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Stand-ins for proto-quic's quic_server (binds UDP on loopback, remembers its
    cache directory) and quic_client (speaks only 37, prints what the real one prints
    on success, with the cached file's body)."""
    server, client = tmp_path / "quic_server", tmp_path / "quic_client"
    server.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import socket, sys, time
        args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", int(args["port"])))
        open("{tmp_path}/cache_dir", "w").write(args["quic_response_cache_dir"])
        time.sleep(60)
    """)
    )
    client.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *--quic-version=37*) ;; *) echo "Failed to connect"; exit 1;; esac
        d=$(cat {tmp_path}/cache_dir)
        echo "Request succeeded (200)."
        echo "body: $(tail -n 1 "$d/quicbed-check.test/index.html")"
    """)
    )
    server.chmod(0o755)
    client.chmod(0o755)
    return server, client


def test_quic_gquic_check_passes_only_when_the_version_is_answered(tmp_path: Path) -> None:
    """roles/quic_server_gquic's provisioning check, against stand-ins: the answer over
    37 passes; another version, a server that exits, a busy port fail, naming why; it
    leaves nothing behind in /tmp."""
    check = ROOT / "roles" / "quic_server_gquic" / "files" / "quic-gquic-check"
    server, client = _stub_quic_pair(tmp_path)
    before = set(Path("/tmp").glob("quic-gquic-check.*"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        busy = s.getsockname()[1]
        cases = [
            (server, "37", 0, "answered a request over gQUIC version 37"),
            (server, "36", 1, "quic_client --quic-version=36 failed"),
            (Path("/bin/false"), "37", 1, "quic_server exited at start"),
        ]
        for srv, version, rc, why in cases:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as free:
                free.bind(("127.0.0.1", 0))
                port = free.getsockname()[1]
            cp = subprocess.run(
                [check, srv, client, version, str(port)], capture_output=True, text=True, timeout=60
            )
            result = json.loads(cp.stdout.strip().splitlines()[-1])
            assert (cp.returncode, result["ok"]) == (rc, rc == 0), cp.stdout + cp.stderr
            assert why in result["why"], result
        cp = subprocess.run(
            [check, server, client, "37", str(busy)], capture_output=True, text=True, timeout=60
        )
        assert cp.returncode == 2 and f"UDP port {busy} is in use" in cp.stdout
    assert set(Path("/tmp").glob("quic-gquic-check.*")) == before


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
def test_q037_client_refuses_other_platforms_before_changing_anything(
    root: None, tmp_path: Path
) -> None:
    """chromium_client_gquic with Q037 on this Debian machine: its first task stops,
    naming the platform; nothing of Chromium 60 or 72 is touched."""
    play = _local_play(
        tmp_path,
        """
        - name: The client role as site.yml applies it for Q037
          ansible.builtin.include_role:
            name: chromium_client_gquic
    """,
    )
    cp = _playbook("-i", "localhost,", str(play), "-e", "quicbed_quic_version=Q037")
    assert cp.returncode != 0
    assert (
        "the Q037 client (Chromium 60.0.3112.113 under Xvfb) is not implemented for Debian"
        in cp.stdout
    ), cp.stdout[-3000:]
    assert _changed(cp) == 0


@pytest.mark.root
@pytest.mark.parallel
@pytest.mark.slow
def test_quic_server_google_refuses_an_unknown_quic_version(tmp_path: Path) -> None:
    """A version name the pinned quiche has not (here gQUIC Q050) is refused by name
    before anything is fetched, even with the build switched off."""
    play = _local_play(
        tmp_path,
        """
        - name: quic_server_google as the testbed applies it
          ansible.builtin.include_role:
            name: quic_server_google
    """,
    )
    for enabled in ("true", "false"):
        cp = _playbook(
            "-i",
            "localhost,",
            str(play),
            "-e",
            json.dumps(
                {
                    "quic_server_google_quic_versions": ["RFCv1", "Q050"],
                    "quic_server_google_enabled": enabled == "true",
                }
            ),
        )
        assert cp.returncode != 0
        assert (
            "the pinned quiche commit's quic_server serves RFCv2, RFCv1, draft29, Q046" in cp.stdout
        ), cp.stdout[-3000:]
        assert _changed(cp) == 0


@pytest.mark.slow
def test_site_renders_quic_server_google_with_q046(tmp_path: Path) -> None:
    """RFCv1 with Q046 added to quiche's checked versions: the play parses and lists the
    version check after the build."""
    inv = _inventory(tmp_path, THREE_GROUPS)
    ev = json.dumps(
        {"quicbed_quic_version": "RFCv1", "quic_server_google_quic_versions": ["RFCv1", "Q046"]}
    )
    for mode in ("--syntax-check", "--list-tasks"):
        cp = _playbook("-i", str(inv), "playbooks/site.yml", "-e", ev, mode)
        assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "quic_server_google : Check the QUIC versions asked for" in cp.stdout


# Chromium 60's .debs against a stand-in for Launchpad's API and archive on loopback.

DEB_VERSION = "60.0.3112.113-0ubuntu0.16.04.1298"


def _fake_deb(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    root = tmp_path / "debroot" / name
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        (root / rel).chmod(0o755)
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {DEB_VERSION}\nArchitecture: amd64\n"
        "Maintainer: quicbed test <test@example.invalid>\nDescription: stand-in\n"
    )
    out = tmp_path / "debs" / f"{name}_{DEB_VERSION}_amd64.deb"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(root), str(out)],
        check=True,
        capture_output=True,
    )
    return out


class _FakeLaunchpad:
    """getPublishedBinaries and binaryFileUrls(include_meta) for the given files, the
    files themselves under /files/, every request recorded; digests may be overridden
    to publish a wrong one."""

    def __init__(self, debs: dict[str, Path], published: dict[str, str] | None = None):
        self.debs, self.requests = debs, []
        self.published = published or {}
        handler = self._handler()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                fake.requests.append(self.path)
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                body: bytes | None = None
                if (
                    url.path == "/devel/ubuntu/+archive/primary"
                    and q.get("ws.op") == "getPublishedBinaries"
                ):
                    name = q.get("binary_name", "")
                    series = fake.base + "/devel/ubuntu/xenial/amd64"
                    ok = (
                        q.get("exact_match") == "true"
                        and q.get("version") == DEB_VERSION
                        and q.get("distro_arch_series") == series
                        and name in fake.debs
                    )
                    link = f"{fake.base}/devel/ubuntu/+archive/primary/+binarypub/{name}"
                    body = json.dumps({"entries": [{"self_link": link}] if ok else []}).encode()
                elif url.path.startswith("/devel/ubuntu/+archive/primary/+binarypub/") and q == {
                    "ws.op": "binaryFileUrls",
                    "include_meta": "true",
                }:
                    name = url.path.rsplit("/", 1)[1]
                    deb = fake.debs[name]
                    own = hashlib.sha256(deb.read_bytes()).hexdigest()
                    digest = fake.published.get(name) or own
                    body = json.dumps(
                        [
                            {
                                "url": f"{fake.base}/files/{deb.name}",
                                "size": 1,
                                "sha1": "x",
                                "sha256": digest,
                            }
                        ]
                    ).encode()
                elif url.path.startswith("/files/"):
                    for deb in fake.debs.values():
                        if url.path == f"/files/{deb.name}":
                            body = deb.read_bytes()
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _chromium60_debs_play(tmp_path: Path, lp: _FakeLaunchpad, pins: dict[str, str]) -> list[str]:
    play = _local_play(
        tmp_path,
        """
        - name: Chromium 60's packages as on the Q037 client
          ansible.builtin.include_role:
            name: chromium_client_gquic
            tasks_from: chromium60_debs
    """,
    )
    ev = {
        "chromium_client_gquic_q037_dir": str(tmp_path / "chromium-60"),
        "chromium_client_gquic_download_dir": str(tmp_path / "cache"),
        "chromium_client_gquic_q037_launchpad_api": lp.base + "/devel",
        "chromium_client_gquic_q037_archive_url": lp.base + "/files",
        "chromium_client_gquic_q037_debs": [
            {"name": n, "sha256": pins.get(n, "")} for n in lp.debs
        ],
    }
    return ["-i", "localhost,", str(play), "-e", json.dumps(ev)]


@pytest.fixture
def chromium60_debs(tmp_path: Path) -> dict[str, Path]:
    return {
        "chromium-codecs-ffmpeg-extra": _fake_deb(
            tmp_path,
            "chromium-codecs-ffmpeg-extra",
            {"usr/lib/chromium-browser/libffmpeg.so": "not a library\n"},
        ),
        "chromium-browser": _fake_deb(
            tmp_path,
            "chromium-browser",
            {
                "usr/lib/chromium-browser/chromium-browser": (
                    "#!/bin/sh\necho Chromium 60.0.3112.113\n"
                )
            },
        ),
    }


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg-deb")
def test_chromium60_debs_unpack_with_launchpads_published_sha256(
    tmp_path: Path, chromium60_debs
) -> None:
    """No pins: each .deb is checked against the SHA-256 Launchpad publishes for it and
    unpacked; the record says so; a second run asks Launchpad nothing and changes
    nothing; a pin that matches is accepted on a rerun, one that does not is refused."""
    lp = _FakeLaunchpad(chromium60_debs)
    try:
        argv = _chromium60_debs_play(tmp_path, lp, {})
        first = _playbook(*argv)
        assert first.returncode == 0, first.stdout[-3000:]
        root = tmp_path / "chromium-60"
        assert (root / "usr/lib/chromium-browser/chromium-browser").read_text().startswith("#!")
        assert (root / "usr/lib/chromium-browser/libffmpeg.so").exists()
        record = json.loads((root / "quicbed-debs.json").read_text())
        sums = {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in chromium60_debs.items()}
        assert {r["name"]: r["sha256"] for r in record} == sums
        assert {r["digest_source"] for r in record} == {"published by Launchpad, not pinned"}
        assert all(r["url"] == f"{lp.base}/files/{r['file']}" for r in record)
        asked = len(lp.requests)
        assert asked == 6  # two publications, two file lists, two files
        second = _playbook(*argv)
        assert second.returncode == 0 and _changed(second) == 0, _changed_lines(second)
        assert len(lp.requests) == asked
        pinned = _playbook(*_chromium60_debs_play(tmp_path, lp, sums))
        assert pinned.returncode == 0 and _changed(pinned) == 0, pinned.stdout[-3000:]
        wrong = _playbook(*_chromium60_debs_play(tmp_path, lp, {"chromium-browser": "0" * 64}))
        assert wrong.returncode != 0
        assert f"is not the pinned {'0' * 64}" in wrong.stdout, wrong.stdout[-3000:]
    finally:
        lp.close()


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="needs dpkg-deb")
def test_chromium60_debs_refuse_a_digest_that_disagrees(tmp_path: Path, chromium60_debs) -> None:
    """A pin that differs from Launchpad's published digest is refused before any
    download; a published digest the bytes do not match fails the download. Neither
    unpacks anything or writes the record."""
    lp = _FakeLaunchpad(chromium60_debs)
    try:
        cp = _playbook(*_chromium60_debs_play(tmp_path, lp, {"chromium-browser": "1" * 64}))
        assert cp.returncode != 0
        assert "expected" in cp.stdout and f"with the pinned {'1' * 64}" in cp.stdout, cp.stdout[
            -3000:
        ]
        assert not any("/files/" in r for r in lp.requests)
    finally:
        lp.close()
    lp = _FakeLaunchpad(chromium60_debs, published={"chromium-browser": "2" * 64})
    try:
        cp = _playbook(*_chromium60_debs_play(tmp_path, lp, {}))
        assert cp.returncode != 0
        assert "checksum" in cp.stdout.lower(), cp.stdout[-3000:]
    finally:
        lp.close()
    root = tmp_path / "chromium-60"
    assert not (root / "quicbed-debs.json").exists()
    assert not (root / "usr").exists()
