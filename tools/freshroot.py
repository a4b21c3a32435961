"""A fresh Debian 12 root on this machine, to run the README's path as a new user would.

`make test`'s fresh-machine test (tests/test_fresh_machine.py) and the first-demo
benchmark (benchmarks/first_demo.py) both need a machine that has nothing: a minimal
Debian 12 (debootstrap `minbase`, cached as a tarball in CACHE) given only what makes
the registries reachable from this machine (the CA trust store, apt's sources and
config, pip/npm config and the registry and CA variables of the environment, DNS),
entered with chroot.

The chroot lives in a private mount namespace held by one process (`unshare`), so no
mount ever appears in this machine's own namespace; inside it, `/` of the root is a
bind mount (as `ip netns` needs), with proc, sys (and this machine's cgroup
hierarchies, as a booted machine has them: CPU per role needs them), dev, dev/pts,
dev/shm and a tmpfs /run. Afterwards, also on failure: the testbed is taken down,
every process whose root is in the chroot is killed, everything is unmounted (a lazy
`umount -R` only as the last resort, reported as forced), the namespace's holder ends,
and `fresh_machine` checks that no mount, process, network namespace or link of it is
left.

Services are not started inside (a `policy-rc.d` that says no, as is usual in a
chroot): the chroot shares this machine's network, and the set-up installs Apache and
sshd, which a real fresh machine would start on its ports 80 and 22. quicbed starts
its own servers in its own namespaces and needs neither.

The root's own download and build caches (WARM) are kept between runs in CACHE/warm
when asked (`warm=True`, the test); without them (`warm=False`, the benchmark) the root
downloads and builds everything as a new machine does.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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

#: a step's time limit when the caller names none
DEFAULT_STEP_TIMEOUT = 900.0


def kernel_cannot() -> str | None:
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
                fields: dict[str, str] = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if SUITE in fields.get("Suites", "").split() and "deb" in fields.get("Types", ""):
                    return fields["URIs"].split()[0]
        elif f.suffix in (".list", ""):
            m = re.search(rf"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M)
            if m:
                return m.group(1)
    raise RuntimeError(f"no apt source for Debian {SUITE} on this machine to bootstrap from")


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
            assert not mounts_under(build), "debootstrap left mounts behind"
            part = tarball.with_suffix(".part")
            _run(
                ["tar", "-C", str(build / "root"), "--numeric-owner", "-czf", str(part), "."],
                timeout=300,
                what="tar",
            )
            part.rename(tarball)
        finally:
            if not mounts_under(build):
                shutil.rmtree(build, ignore_errors=True)
        return tarball


def _run(argv: list[str], *, timeout: float, what: str) -> str:
    cp = group_run(argv, timeout=timeout)
    assert cp.returncode == 0, f"{what} failed ({cp.returncode}):\n{cp.stdout[-4000:]}"
    return cp.stdout


def group_run(
    argv: list[str], *, timeout: float, env: dict[str, str] | None = None, cwd: str | None = None
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


def mounts_under(path: Path, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points at or below path in the mount namespace of mountinfo's process."""
    p = str(path)
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return []
    points = [ln.split()[4].replace("\\040", " ") for ln in lines]
    return [m for m in points if m == p or m.startswith(p + "/")]


def pids_rooted_in(root: Path) -> list[int]:
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


def cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


class FreshMachine:
    """A Debian root in a private mount namespace; commands run in it with chroot."""

    def __init__(
        self,
        tarball: Path,
        prefix: str,
        *,
        warm: bool = True,
        timeouts: Mapping[str, float] | None = None,
    ) -> None:
        self.dir = Path(f"{WORK}/quicbed-fresh-{prefix}")
        self.root = self.dir / "root"
        self.prefix = prefix
        self.warm = warm
        self.timeouts = dict(timeouts or {})
        self.holder: subprocess.Popen[bytes] | None = None
        self.log: list[str] = []
        self.times: dict[str, float] = {}
        self.env: dict[str, str] = {}
        self.lock = open(f"{self.dir}.lock", "w")  # noqa: SIM115 (held for the root's life)
        fcntl.flock(self.lock, fcntl.LOCK_EX)  # tells sweep_leftovers this root is in use
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
        for inside, kept in WARM.items() if self.warm else ():  # the root's own caches
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
        return group_run(
            ["nsenter", f"--target={self.holder.pid}", "--mount", "--", *argv], timeout=timeout
        )

    def sh(self, step: str, command: str, cwd: str = "/root") -> subprocess.CompletedProcess[str]:
        """One shell command in the chroot (as root, with only self.env), timed and logged."""
        argv = self._in_root(f"cd {cwd} && {command}")
        t = time.monotonic()
        cp = self.nsenter(argv, timeout=self.timeouts.get(step, DEFAULT_STEP_TIMEOUT))
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
            pids = pids_rooted_in(self.root)
            if pids:
                forced.append(f"{sig.name} to {pids}: {cmdlines(pids)}")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while pids_rooted_in(self.root) and time.monotonic() < deadline:
                time.sleep(0.2)
        if self.holder is not None and self.holder.poll() is None:
            info = f"/proc/{self.holder.pid}/mountinfo"
            for point in reversed(mounts_under(self.root, info)):  # deepest first
                self.nsenter(["umount", point], timeout=60)
            left = mounts_under(self.root, info)
            if left:
                forced.append(f"lazy umount -R of {left}")
                self.nsenter(["umount", "-R", "-l", str(self.root)], timeout=60)
            self.holder.stdin.close()  # type: ignore[union-attr]
            self.holder.wait(timeout=30)
        return forced

    def sh_quiet(self, command: str) -> None:
        """A teardown's command: from the checkout where there is one, not logged."""
        self.nsenter(self._in_root(f"cd {CHROOT_REPO} 2>/dev/null || cd /; {command}"), 120)

    def _in_root(self, script: str) -> list[str]:
        """``script`` run by sh in the root, as root, with only self.env."""
        env = (f"{k}={v}" for k, v in self.env.items())
        return ["chroot", str(self.root), "/usr/bin/env", "-i", *env, "/bin/sh", "-c", script]

    def remove(self) -> None:
        """Delete the root, never across a file system boundary (a mount left behind)."""
        if mounts_under(self.dir):
            return
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir)], timeout=300)
        Path(self.lock.name).unlink(missing_ok=True)
        self.lock.close()


def host_netns_and_links(prefix: str) -> list[str]:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [ln for ln in (ns + links).splitlines() if prefix in ln]


def sweep_leftovers() -> None:
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
            if not mounts_under(d) and not pids_rooted_in(d / "root"):
                subprocess.run(["rm", "-rf", "--one-file-system", str(d)], timeout=300)
                Path(f"{d}.lock").unlink(missing_ok=True)


@contextlib.contextmanager
def fresh_machine(
    prefix: str | None = None,
    *,
    warm: bool = True,
    timeouts: Mapping[str, float] | None = None,
) -> Iterator[FreshMachine]:
    """A fresh root, configured and entered; taken down and removed afterwards.

    Raises RuntimeError when this kernel cannot hold one (``kernel_cannot``), and after
    the teardown when anything of it was forced or is left behind.
    """
    why = kernel_cannot()
    if why:
        raise RuntimeError(why)
    sweep_leftovers()
    t = time.monotonic()
    tarball = base_tarball(debian_mirror())
    base_time = time.monotonic() - t
    m = FreshMachine(tarball, prefix or "f" + secrets.token_hex(3), warm=warm, timeouts=timeouts)
    m.times = {"base tarball": base_time, **m.times}
    try:
        m.configure()
        m.enter()
        yield m
    finally:
        forced = m.teardown()
        left = {
            "forced in the teardown": forced,
            "mounts": mounts_under(m.dir),
            "processes": [str(p) for p in pids_rooted_in(m.root)],
            "network namespaces or links": host_netns_and_links(m.prefix),
        }
        m.remove()
        if m.dir.exists():
            left["directory"] = [str(m.dir)]
        problems = "; ".join(f"{k}: {v}" for k, v in left.items() if v)
        if problems:
            raise RuntimeError(f"the fresh root {m.dir} was not cleanly removed: {problems}")
