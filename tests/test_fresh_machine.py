"""The README's path on a machine that has nothing: a fresh Debian 12 minbase root.

CI runs on a machine that earlier sessions have already set up, so a missing install
step cannot show there. This test bootstraps a minimal Debian 12 (debootstrap
`minbase`, cached as a tarball in /var/cache/quicbed/fresh-machine), gives it only what
makes the registries reachable from this machine (the CA trust store, apt's sources and
config, pip/npm config and the registry and CA variables of the environment, DNS), then
inside it, with chroot:

1. runs the README's prerequisites line exactly as written there,
2. clones this repository's committed HEAD,
3. runs the README's set-up command (`make setup`), twice: the second must change
   nothing (`changed=0`, Go binaries byte for byte the same),
4. measures one small cell (5 KB, 10 Mbit/s, 3 runs per arm) on the local testbed,
5. asks for a cell with a component the base lacks (the gQUIC arm's browser): refused
   naming `make setup-chromium72`; runs that command; measures that cell.

The chroot lives in a private mount namespace held by one process (`unshare`), so no
mount ever appears in this machine's own namespace; inside it, `/` of the root is a
bind mount (as `ip netns` needs), with proc, sys (and this machine's cgroup
hierarchies, as a booted machine has them: CPU per role needs them), dev, dev/pts,
dev/shm and a tmpfs /run. Afterwards, also on failure: the testbed is taken down,
every process whose root is in the chroot is killed, everything is unmounted (a lazy
`umount -R` only as the last resort, and then the test fails), the namespace's holder
ends, and the test checks that no mount, process, network namespace or link of it is
left.

Services are not started inside (a `policy-rc.d` that says no, as is usual in a
chroot): the chroot shares this machine's network, and the set-up installs Apache and
sshd, which a real fresh machine would start on its ports 80 and 22. quicbed starts
its own servers in its own namespaces and needs neither.

3 to 4 minutes here, by the machine's load: debootstrap 30 s the first time on a
machine (then the cached tarball, 3 s to unpack), prerequisites 10 s, the first set-up
(the base) 110 s with the root's caches warm, the second 15 s, the cell 20 s, the
component and its cell 40 s. The step times of the last run are printed (pytest -s) and
kept in /var/cache/quicbed/fresh-machine/last-run.txt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SUITE = "bookworm"  # Debian 12
CACHE = Path(os.environ.get("QUICBED_FRESH_CACHE", "/var/cache/quicbed/fresh-machine"))
WORK = Path("/var/tmp")  # on disk: the root grows to about 3 GB
CHROOT_REPO = "/root/quicbed"
ORIGIN = "/mnt/quicbed-origin"  # this checkout, bound read-only, cloned from

# How this machine reaches the registries, as the environment says it: CA bundles,
# proxies, registry mirrors. Passed into the chroot when set here.
REGISTRY_VARS = re.compile(
    r"^(PIP_(?!FIND_LINKS$)\w+|NPM_CONFIG_\w+|npm_config_\w+|GOPROXY|GOSUMDB|GONOSUMDB|GOPRIVATE"
    r"|GONOPROXY|GOINSECURE|(http|https|ftp|no|all)_proxy|(HTTP|HTTPS|FTP|NO|ALL)_PROXY"
    r"|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|NODE_EXTRA_CA_CERTS"
    r"|GIT_SSL_CAINFO)$"
)
# The host's package-manager and trust configuration, copied in where present.
HOST_FILES = [
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/apt/sources.list",
    "/etc/apt/sources.list.d",
    "/etc/apt/apt.conf.d",
    "/etc/apt/preferences.d",
    "/etc/apt/trusted.gpg.d",
    "/etc/apt/keyrings",
    "/etc/apt/auth.conf.d",
    "/etc/ssl/certs",
    "/usr/local/share/ca-certificates",
    "/etc/pip.conf",
    "/etc/xdg/pip/pip.conf",
    "/root/.config/pip/pip.conf",
    "/root/.pip/pip.conf",
    "/etc/npmrc",
    "/usr/etc/npmrc",
    "/root/.npmrc",
    "/root/.config/go/env",
]
# The download and build caches of the chroot's set-up, kept between runs of this test
# in CACHE/warm (never this machine's own caches: the chroot installs its own Rust and
# Go, whose builds must not mix with the host's). A machine that runs `make setup` a
# second time has them too; what this test checks is which tools and packages the
# set-up installs, and every tool is still installed inside the chroot, from the
# registries. With them warm, the first set-up skips compiling quiche's BoringSSL and
# downloading Go, Chromium 72, the Go modules and apt's packages (measured on a busy
# machine: 500 s cold, 347 s warm; with apt's packages kept too, the set-up step took
# 309 s against 336 s; last-run.txt has the latest). apt keeps what it downloads only
# because the chroot's copy of the host's Docker image setting that deletes it
# (docker-clean) is left out. A cold
# run (the first on a machine, or after `rm -r CACHE/warm`) is what CI's own first
# `make setup` on a new machine does.
WARM = {
    "/var/cache/quicbed": "var-cache-quicbed",  # cargo home and target, npm, Go's zip
    "/root/go": "root-go",  # Go's module cache
    "/root/.cache/go-build": "root-cache-go-build",  # Go's build cache
    "/var/cache/apt/archives": "var-cache-apt-archives",  # apt's downloaded packages
}
#: the host's apt settings not copied in: docker-clean deletes apt's downloads
APT_LEFT_OUT = ("docker-clean",)
STEP_TIMEOUT = {
    "prerequisites": 300,
    "clone": 120,
    "setup": 900,
    "setup again": 300,
    "cell": 300,
    "component": 600,
}


# --- what the README says ---------------------------------------------------------


def readme_commands() -> tuple[str, str]:
    """The prerequisites line and the set-up command, exactly as README.md states them."""
    text = README.read_text()
    blocks = re.findall(r"^```\n(.*?)^```", text, re.S | re.M)
    prereq = [ln for b in blocks for ln in b.splitlines() if ln.startswith("apt-get ")]
    assert len(prereq) == 1, f"README.md must have one apt-get prerequisites line: {prereq}"
    assert "`make demo` first runs `make setup`" in text, "README.md no longer names its set-up"
    return prereq[0], "make setup"


def test_readme_names_the_prerequisites_of_a_minimal_debian() -> None:
    prereq, _ = readme_commands()
    for pkg in ("make", "python3-venv", "git", "ca-certificates"):
        assert re.search(rf"\s{re.escape(pkg)}(\s|$)", prereq), (pkg, prereq)


# --- the machine ------------------------------------------------------------------


def _kernel_cannot() -> str | None:
    """Why this kernel cannot run a chroot with its own mounts, or None."""
    if not shutil.which("unshare") or not shutil.which("nsenter"):
        return "needs util-linux's unshare and nsenter"
    cp = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "mount -t tmpfs none /mnt && mount -t proc proc /mnt && umount /mnt && umount /mnt",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if cp.returncode != 0:
        return f"this kernel refuses a private mount namespace with proc: {cp.stderr.strip()}"
    return None


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 .sources or a sources.list)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text()
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if SUITE in fields.get("Suites", "").split() and "deb" in fields.get("Types", ""):
                    return fields["URIs"].split()[0]
        elif f.suffix in (".list", ""):
            m = re.search(rf"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M)
            if m:
                return m.group(1)
    pytest.fail(f"no apt source for Debian {SUITE} on this machine to bootstrap from")


def base_tarball(mirror: str) -> Path:
    """A Debian 12 minbase root as a tarball, made once per machine (and mirror)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{SUITE} minbase amd64 {mirror}".encode()).hexdigest()[:12]
    tarball = CACHE / f"debian-{SUITE}-minbase-amd64-{key}.tar.gz"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one debootstrap at a time per machine
        if tarball.exists():
            return tarball
        if not shutil.which("debootstrap"):
            _run(
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"],
                timeout=300,
                what="apt-get install debootstrap",
            )
        build = Path(f"{CACHE}/build-{os.getpid()}")
        shutil.rmtree(build, ignore_errors=True)
        try:
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    "--arch=amd64",
                    SUITE,
                    str(build / "root"),
                    mirror,
                ],
                timeout=600,
                what="debootstrap",
            )
            assert not _mounts_under(build), "debootstrap left mounts behind"
            part = tarball.with_suffix(".part")
            _run(
                ["tar", "-C", str(build / "root"), "--numeric-owner", "-czf", str(part), "."],
                timeout=300,
                what="tar",
            )
            part.rename(tarball)
        finally:
            if not _mounts_under(build):
                shutil.rmtree(build, ignore_errors=True)
        return tarball


def _run(argv: list[str], *, timeout: float, what: str) -> str:
    cp = _group_run(argv, timeout=timeout)
    assert cp.returncode == 0, f"{what} failed ({cp.returncode}):\n{cp.stdout[-4000:]}"
    return cp.stdout


def _group_run(
    argv: list[str], *, timeout: float, env: dict | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run in its own process group; on time-out the whole group is killed."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return subprocess.CompletedProcess(argv, -9, f"{out}\n[timed out after {timeout:g} s]")
    return subprocess.CompletedProcess(argv, proc.returncode, out)


def _mounts_under(path: Path, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points at or below path in the mount namespace of mountinfo's process."""
    p = str(path)
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return []
    points = [ln.split()[4].replace("\\040", " ") for ln in lines]
    return [m for m in points if m == p or m.startswith(p + "/")]


def _pids_rooted_in(root: Path) -> list[int]:
    """Processes whose root directory is the chroot or inside it."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            r = os.readlink(d / "root")
        except OSError:
            continue
        if r == str(root) or r.startswith(str(root) + "/"):
            pids.append(int(d.name))
    return pids


def _cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


class FreshMachine:
    """A Debian root in a private mount namespace; commands run in it with chroot."""

    def __init__(self, tarball: Path, prefix: str) -> None:
        self.dir = Path(f"{WORK}/quicbed-fresh-{prefix}")
        self.root = self.dir / "root"
        self.prefix = prefix
        self.holder: subprocess.Popen | None = None
        self.log: list[str] = []
        self.times: dict[str, float] = {}
        self.lock = open(f"{self.dir}.lock", "w")  # noqa: SIM115 (held for the root's life)
        fcntl.flock(self.lock, fcntl.LOCK_EX)  # tells _sweep_leftovers this root is in use
        self.root.mkdir(parents=True)
        t = time.monotonic()
        _run(
            ["tar", "-C", str(self.root), "--numeric-owner", "-xzf", str(tarball)],
            timeout=300,
            what="unpack",
        )
        self.times["unpack"] = time.monotonic() - t

    # -- configuration from the host ------------------------------------------------

    def configure(self) -> None:
        for name in HOST_FILES:
            src = Path(name)
            dst = self.root / name.lstrip("/")
            if not src.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
            else:
                dst.unlink(missing_ok=True)
                shutil.copy2(src, dst)
        if (Path("/etc/apt/sources.list.d") / "debian.sources").exists() and not Path(
            "/etc/apt/sources.list"
        ).exists():
            (self.root / "etc/apt/sources.list").unlink(missing_ok=True)  # debootstrap's
        for name in APT_LEFT_OUT:  # so that apt's downloads stay in the warm cache
            (self.root / "etc/apt/apt.conf.d" / name).unlink(missing_ok=True)
        (self.root / "etc/apt/apt.conf.d/99quicbed-keep-downloads").write_text(
            'Binary::apt::APT::Keep-Downloaded-Packages "true";\n'
        )
        policy = self.root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\n# quicbed's fresh-machine test: no services here\nexit 101\n")
        policy.chmod(0o755)
        self.env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "DEBIAN_FRONTEND": "noninteractive",
            **{k: v for k, v in os.environ.items() if REGISTRY_VARS.match(k)},
        }

    # -- the namespace and its mounts ---------------------------------------------

    def enter(self) -> None:
        """Start the namespace's holder and mount the root's file systems in it."""
        # The holder waits for the end of its stdin, a pipe only this process holds: it
        # ends with the teardown, or by itself when a killed test run closes the pipe.
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "read _"],
            start_new_session=True,
            stdin=subprocess.PIPE,
        )
        r = self.root
        (r / ORIGIN.lstrip("/")).mkdir(parents=True, exist_ok=True)
        script = f"""set -e
            mount --bind {r} {r}
            mount -t proc proc {r}/proc
            mount -t sysfs sysfs {r}/sys
            mount --rbind /sys/fs/cgroup {r}/sys/fs/cgroup
            mount --bind /dev {r}/dev
            mount --bind /dev/pts {r}/dev/pts
            mount -t tmpfs -o mode=1777 shm {r}/dev/shm
            mount -t tmpfs -o mode=0755 run {r}/run
            mkdir -p {r}/run/lock {r}/run/netns
            mount --bind {ROOT} {r}{ORIGIN}
            mount -o remount,bind,ro {r}{ORIGIN}
        """
        for inside, kept in WARM.items():  # the chroot's own caches, kept between runs
            (CACHE / "warm" / kept).mkdir(parents=True, exist_ok=True)
            script += f"mkdir -p {r}{inside}\nmount --bind {CACHE}/warm/{kept} {r}{inside}\n"
        deadline = time.monotonic() + 10
        while self._same_ns():  # until unshare has made the namespace
            assert self.holder.poll() is None, "unshare --mount failed"
            assert time.monotonic() < deadline, "the namespace holder did not start"
            time.sleep(0.05)
        cp = self.nsenter(["sh", "-c", script], timeout=60)
        assert cp.returncode == 0, cp.stdout

    def _same_ns(self) -> bool:
        assert self.holder is not None
        try:
            return os.readlink(f"/proc/{self.holder.pid}/ns/mnt") == os.readlink(
                "/proc/self/ns/mnt"
            )
        except OSError:
            return True

    def nsenter(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        assert self.holder is not None
        return _group_run(
            ["nsenter", f"--target={self.holder.pid}", "--mount", "--", *argv], timeout=timeout
        )

    def sh(self, step: str, command: str, cwd: str = "/root") -> subprocess.CompletedProcess[str]:
        """One shell command in the chroot (as root, with only self.env), timed and logged."""
        argv = [
            "chroot",
            str(self.root),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in self.env.items()),
            "/bin/sh",
            "-c",
            f"cd {cwd} && {command}",
        ]
        t = time.monotonic()
        cp = self.nsenter(argv, timeout=STEP_TIMEOUT[step])
        took = time.monotonic() - t
        self.times[step] = self.times.get(step, 0) + took
        self.log.append(
            f"===== {step}: {command} (rc {cp.returncode}, {took:.0f} s)\n{cp.stdout[-6000:]}"
        )
        return cp

    # -- teardown -------------------------------------------------------------------

    def teardown(self) -> list[str]:
        """Everything down, also after a failure; returns what had to be forced."""
        forced: list[str] = []
        if self.holder is not None and self.holder.poll() is None:
            if (self.root / "root/quicbed/.venv/bin/quicbed").exists():
                self.sh_quiet(f".venv/bin/quicbed testbed down --prefix {self.prefix}")
            self.sh_quiet(  # any namespace of ours the CLI did not know about
                f"for n in $(ip netns list 2>/dev/null | awk '{{print $1}}'); do "
                f"case $n in {self.prefix}-*) ip netns delete $n;; esac; done"
            )
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _pids_rooted_in(self.root)
            if pids:
                forced.append(f"{sig.name} to {pids}: {_cmdlines(pids)}")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while _pids_rooted_in(self.root) and time.monotonic() < deadline:
                time.sleep(0.2)
        if self.holder is not None and self.holder.poll() is None:
            info = f"/proc/{self.holder.pid}/mountinfo"
            for point in reversed(_mounts_under(self.root, info)):  # deepest first
                self.nsenter(["umount", point], timeout=60)
            left = _mounts_under(self.root, info)
            if left:
                forced.append(f"lazy umount -R of {left}")
                self.nsenter(["umount", "-R", "-l", str(self.root)], timeout=60)
            self.holder.stdin.close()  # type: ignore[union-attr]
            self.holder.wait(timeout=30)
        return forced

    def sh_quiet(self, command: str) -> None:
        argv = [
            "chroot",
            str(self.root),
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in self.env.items()),
            "/bin/sh",
            "-c",
            f"cd {CHROOT_REPO} 2>/dev/null || cd /; {command}",
        ]
        self.nsenter(argv, timeout=120)

    def remove(self) -> None:
        """Delete the root, never across a file system boundary (a mount left behind)."""
        if _mounts_under(self.dir):
            return
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir)], timeout=300)
        Path(self.lock.name).unlink(missing_ok=True)
        self.lock.close()


def _host_netns_and_links(prefix: str) -> list[str]:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [ln for ln in (ns + links).splitlines() if prefix in ln]


def _sweep_leftovers() -> None:
    """Roots of earlier runs on this machine that were killed before their teardown.

    A root is in use while its lock is held; the mounts of a dead run were in its own
    namespace, which ended with its last process, so here the root is plain files.
    """
    for d in WORK.glob("quicbed-fresh-*"):
        if not d.is_dir():
            continue
        with open(f"{d}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another test run's root
            if not _mounts_under(d) and not _pids_rooted_in(d / "root"):
                subprocess.run(["rm", "-rf", "--one-file-system", str(d)], timeout=300)
                Path(f"{d}.lock").unlink(missing_ok=True)


@pytest.fixture
def machine(root: None) -> Iterator[FreshMachine]:
    why = _kernel_cannot()
    if why:
        pytest.skip(why)
    _sweep_leftovers()
    t = time.monotonic()
    tarball = base_tarball(debian_mirror())
    base_time = time.monotonic() - t
    m = FreshMachine(tarball, "f" + secrets.token_hex(3))
    m.times = {"base tarball": base_time, **m.times}
    try:
        m.configure()
        m.enter()
        yield m
    finally:
        forced = m.teardown()
        left_mounts = _mounts_under(m.dir)
        left_pids = _pids_rooted_in(m.root)
        left_net = _host_netns_and_links(m.prefix)
        m.remove()
        times = ", ".join(f"{k} {v:.0f} s" for k, v in m.times.items())
        print("fresh machine:", times)
        (CACHE / "last-run.txt").write_text(f"{time.strftime('%F %T')}: {times}\n")
        assert not forced, f"teardown had to force: {forced}"
        assert not left_mounts, f"mounts left under {m.dir}: {left_mounts}"
        assert not left_pids, f"processes left in the chroot: {left_pids}"
        assert not left_net, f"network namespaces or links left: {left_net}"
        assert not m.dir.exists(), f"{m.dir} was not removed"


# --- the test ----------------------------------------------------------------------


def _changed_tasks(out: str) -> str:
    """The changed lines of an ansible-playbook output, each under its task."""
    shown, task = [], ""
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith("changed:"):
            shown.append(f"{task}: {line}")
    return "\n".join(shown)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.root
def test_readme_path_on_a_fresh_debian(machine: FreshMachine) -> None:
    m = machine
    prereq, setup = readme_commands()
    log = lambda: "\n".join(m.log)  # noqa: E731

    # The mounts are the namespace's own: none of them is visible in this one.
    assert not _mounts_under(m.dir), "the chroot's mounts leaked into this namespace"
    inside = _mounts_under(m.root, f"/proc/{m.holder.pid}/mountinfo")  # type: ignore[union-attr]
    assert str(m.root) in inside and f"{m.root}/proc" in inside, inside

    # A minbase root has neither make nor a venv-capable Python.
    assert m.sh("prerequisites", "command -v make || command -v git").returncode != 0
    cp = m.sh("prerequisites", prereq)
    assert cp.returncode == 0, log()

    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    cp = m.sh(
        "clone",
        f"git clone -q file://{ORIGIN} {CHROOT_REPO} && git -C {CHROOT_REPO} rev-parse HEAD",
    )
    assert cp.returncode == 0 and head in cp.stdout, log()

    cp = m.sh("setup", setup, cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    assert re.search(
        r"localhost\s+:\s+ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", cp.stdout
    ), log()
    assert "quic_server_google_enabled is false" in cp.stdout, log()
    sums = m.sh("setup again", f"sha256sum {CHROOT_REPO}/build/bin/*").stdout
    built = {line.split("/")[-1] for line in sums.splitlines()}
    # the base: quicbed's Go servers, emulator and bulk client (quiche's server is a
    # component of its own, `make setup-quiche`)
    assert built == {
        "quicbed-linkem",
        "quicbed-h3server",
        "quicbed-bulk",
        "quicbed-gquic-server",
    }, sums
    # the same playbook again (also `make setup`'s idempotence on this machine: the
    # one check of it, on the cleanest machine there is): nothing changes, and the Go
    # binaries, rebuilt, are the same bytes
    cp = m.sh("setup again", setup, cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    recap = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", cp.stdout)
    assert recap, log()
    assert recap.group(1) == "0", "second set-up changed:\n" + _changed_tasks(cp.stdout)
    assert "Build the binaries into the scratch directory" in cp.stdout, log()  # rebuilt
    assert m.sh("setup again", f"sha256sum {CHROOT_REPO}/build/bin/*").stdout == sums
    cp = m.sh(
        "setup again",
        "command -v chromium iperf3 node && "
        f"test -d {CHROOT_REPO}/client/node_modules/chrome-har-capturer",
    )
    assert cp.returncode == 0, log()

    _cell_done(m, "cell", ("h2", "h3"), log)

    # a component beyond the base, installed when a cell asks for it: refused first,
    # naming the one command; after that command, the same cell runs. The gQUIC arm's
    # browser, Chromium 72 (Envoy's kernel probes cannot run in this chroot: the
    # namespace's mount view hides its binary's path from them; a real machine has none)
    gquic = ("h2", "gquic")
    cp = m.sh("component", _cell_command(m, gquic), cwd=CHROOT_REPO)
    assert cp.returncode == 2 and "install it: make setup-chromium72" in cp.stdout, log()
    cp = m.sh("component", "make setup-chromium72", cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    _cell_done(m, "component", gquic, log)


def _cell_command(m: FreshMachine, arms: tuple[str, ...]) -> str:
    return (
        f".venv/bin/quicbed cell --rate 10 --rtt 36 --page 5kb --runs 3 "
        f"--arms {','.join(arms)} --prefix {m.prefix} --out /root/r --json"
    )


def _cell_done(m: FreshMachine, step: str, arms: tuple[str, ...], log: Any) -> None:
    """One small cell of ``arms`` in the fresh root: done, each arm's 3 loads measured."""
    cp = m.sh(step, _cell_command(m, arms), cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    found = re.search(r"^\{$.*^\}$", cp.stdout, re.S | re.M)
    assert found, log()
    result = json.loads(found.group(0))
    assert result["status"] == "done", result
    for arm in arms:
        v = result["verified"][arm]
        # a load the busy machine spoiled is measured again (v["replacements"])
        assert v["measured"] - v["replacements"] == 3 and v["valid"] >= 2, (
            arm,
            v,
            result.get("invalid"),
        )


@pytest.mark.slow
@pytest.mark.root
def test_teardown_after_a_failure_leaves_nothing(root: None) -> None:
    """A step that fails with a process still running in the chroot and a network
    namespace of the testbed's prefix still mounted: the teardown kills the process,
    unmounts everything (the namespace's bind mount too), ends the holder, says what it
    had to force, and nothing of it is left."""
    why = _kernel_cannot()
    if why:
        pytest.skip(why)
    m = FreshMachine(base_tarball(debian_mirror()), "f" + secrets.token_hex(3))
    stray = None
    try:
        m.configure()
        m.enter()
        with pytest.raises(AssertionError, match="a step failed"):
            netns = f"{m.root}/run/netns/{m.prefix}-client"
            cp = m.nsenter(["sh", "-c", f"touch {netns} && unshare --net={netns} true"], 30)
            assert cp.returncode == 0, cp.stdout
            stray = subprocess.Popen(
                [
                    "nsenter",
                    f"--target={m.holder.pid}",
                    "--mount",
                    "--",
                    "nsenter",  # type: ignore[union-attr]
                    f"--net={netns}",
                    "chroot",
                    str(m.root),
                    "/bin/sleep",
                    "600",
                ],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while not _pids_rooted_in(m.root):
                assert time.monotonic() < deadline, "the stray process did not start"
                time.sleep(0.05)
            net = os.readlink(f"/proc/{_pids_rooted_in(m.root)[0]}/ns/net")
            assert net != os.readlink("/proc/self/ns/net")
            assert netns in _mounts_under(m.root, f"/proc/{m.holder.pid}/mountinfo")  # type: ignore[union-attr]
            raise AssertionError("a step failed")
    finally:
        forced = m.teardown()
        if stray is not None:
            stray.wait(timeout=30)
        ended = m.holder is not None and m.holder.poll() is not None
        left = (_mounts_under(m.dir), _pids_rooted_in(m.root), ended)
        m.remove()
    assert any("SIGTERM" in f and "/bin/sleep 600" in f for f in forced), forced
    assert left == ([], [], True), left
    in_net = []
    for d in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(d / "ns" / "net") == net:
                in_net.append(d.name)
    assert not in_net, f"processes still in the testbed's network namespace: {in_net}"
    assert not m.dir.exists() and not Path(f"{m.dir}.lock").exists()
