"""The embedded testbed: server, bridge and client as network namespaces on this machine.

Topology (one layer-2 segment, the bridge transparent like Emulab's bridge node)::

    [P-server] eth0 10.10.1.1/24 ── srv [P-bridge] cli ── eth0 10.10.1.2/24 [P-client]

The bridge namespace has no addresses; a shaper forwards between ``srv`` and ``cli``
(the userspace emulator over AF_PACKET, or a kernel bridge with netem). Every
name carries the prefix, so two testbeds or a crashed leftover never collide, and
``down`` can find and remove everything of a prefix from the kernel's own lists,
even after ``kill -9`` of the process that made it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.backends import LocalBackend
from quicbed.errors import QuicbedError
from quicbed.paths import REPO_ROOT, bin_path
from quicbed.testbed.lifecycle import (
    CLIENT_IP,
    PREFIX_LEN,
    ROLES,
    SERVER_IP,
    Process,
    RPath,
    Testbed,
    check_role,
)

#: interface of each role's veth end(s), inside its namespace
IFACES = {"server": ("eth0",), "bridge": ("srv", "cli"), "client": ("eth0",)}
STATE_ROOT = Path("/run/quicbed")
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")


def check_prefix(prefix: str) -> str:
    if not _PREFIX_RE.match(prefix):
        raise QuicbedError(
            f"testbed prefix {prefix!r} is not 1-8 lowercase letters/digits starting with a letter"
        )
    return prefix


def _netns_list() -> list[str]:
    out = proc.run(["ip", "-json", "netns", "list"], timeout=10).stdout.strip()
    return [e["name"] for e in json.loads(out)] if out else []


class LocalProcess(Process):
    """A daemon in one of our namespaces: our own child, so its exit code is known."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def stop(self, timeout: float = 5.0) -> None:
        if self.popen.poll() is None:  # once reaped, the PID may already be another's
            proc.stop_pid(self.pid, timeout=timeout)


@dataclass
class LocalTestbed(LocalBackend, Testbed):
    """Three namespaces and two veth pairs; runs commands and daemons inside them.

    All roles share this machine's file system, so files are read and written in
    place and ``push``/``pull`` copy only where the two paths differ.
    """

    prefix: str = "qb"
    server_ip: str = SERVER_IP
    client_ip: str = CLIENT_IP
    _created: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        check_prefix(self.prefix)

    @classmethod
    def from_options(
        cls, *, prefix: str, hosts: str | None, user: str | None, key: str | None
    ) -> LocalTestbed:
        """The namespaces named by ``--prefix``; the other options are another kind's."""
        return cls(prefix)

    # --- names ------------------------------------------------------------------------
    def ns(self, role: str) -> str:
        return f"{self.prefix}-{check_role(role)}"

    def name(self, role: str) -> str:
        return self.ns(role)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "prefix": self.prefix}

    def lock_path(self) -> Path:
        """Beside the state folders (a file name with a dot: never a prefix's folder)."""
        return STATE_ROOT / f"{self.prefix}.lock"

    @property
    def state_dir(self) -> Path:
        """Per-testbed runtime state (config files, pid files); gone with a reboot, like netns."""
        return STATE_ROOT / self.prefix

    # --- lifecycle --------------------------------------------------------------------
    def exists(self) -> bool:
        names = set(_netns_list())
        return all(self.ns(r) in names for r in ROLES)

    def leftovers(self) -> list[str]:
        """Namespaces of this prefix that exist (a partial set means a crashed set-up)."""
        names = set(_netns_list())
        return [self.ns(r) for r in ROLES if self.ns(r) in names]

    def up(self) -> bool:
        """Create the topology. Idempotent: returns False if it was already complete.

        A partial leftover (a crash during set-up) is removed first, so ``up`` always
        ends in the one known state or raises with nothing half-made.
        """
        if self.exists() and self._healthy():
            return False
        if self.leftovers():
            self.down()
        try:
            self._create()
        except BaseException:
            self.down()
            raise
        self._created = True
        return True

    def _create(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for role in ROLES:
            proc.run(["ip", "netns", "add", self.ns(role)])
        s, b, c = self.ns("server"), self.ns("bridge"), self.ns("client")
        proc.run(
            [
                "ip",
                "link",
                "add",
                "eth0",
                "netns",
                s,
                "type",
                "veth",
                "peer",
                "name",
                "srv",
                "netns",
                b,
            ]
        )
        proc.run(
            [
                "ip",
                "link",
                "add",
                "eth0",
                "netns",
                c,
                "type",
                "veth",
                "peer",
                "name",
                "cli",
                "netns",
                b,
            ]
        )
        for role in ROLES:
            ns = self.ns(role)
            # No IPv6: router solicitations and DAD would be stray packets on the link.
            for key in ("all", "default"):
                self.sysctl(role, f"net.ipv6.conf.{key}.disable_ipv6", "1")
            proc.run(["ip", "-n", ns, "link", "set", "lo", "up"])
            for dev in IFACES[role]:
                self.sysctl(role, f"net.ipv6.conf.{dev}.disable_ipv6", "1")
                proc.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "ethtool",
                        "-K",
                        dev,
                        "tso",
                        "off",
                        "gso",
                        "off",
                        "gro",
                        "off",
                        "tx",
                        "off",
                    ]
                )
                proc.run(["ip", "-n", ns, "link", "set", dev, "up"])
        proc.run(["ip", "-n", s, "addr", "add", f"{self.server_ip}/{PREFIX_LEN}", "dev", "eth0"])
        proc.run(["ip", "-n", c, "addr", "add", f"{self.client_ip}/{PREFIX_LEN}", "dev", "eth0"])
        self.check_offloads()

    def _healthy(self) -> bool:
        try:
            self.check_offloads()
        except QuicbedError:
            return False
        return True

    def offload_interfaces(self) -> dict[str, tuple[str, ...]]:
        return dict(IFACES)

    def check_offloads(
        self, expected: Mapping[str, str] | None = None
    ) -> dict[str, dict[str, str]]:
        """Read back ``ethtool -k`` on every veth end; raise if any offload is not as
        ``expected`` (a cell's offloads, quicbed.roles.offloads), else off.

        A forwarded frame with a partial checksum is dropped by the receiver, and
        64 KB super-packets would make loss, queue and rate apply per super-packet.
        """
        from quicbed.roles import offloads

        want = {k: "off" for k in offloads.FEATURES} | dict(expected or {})
        report: dict[str, dict[str, str]] = {}
        for role in ROLES:
            for dev in IFACES[role]:
                feats = offloads.read(self, role, dev)
                bad = offloads.differences(want, {f"{self.ns(role)}:{dev}": feats})
                if bad:
                    raise QuicbedError("; ".join(bad))
                report[f"{role}:{dev}"] = {offloads.FEATURES[k]: v for k, v in feats.items()}
        return report

    def down(self) -> list[str]:
        """Remove everything of this prefix: processes in its namespaces, then namespaces,
        then its CPU groups (and anything left running in them).

        Works from the kernel's lists, not from memory, so it also cleans up after a
        crash. Returns what it removed.
        """
        removed: list[str] = []
        for ns in self.leftovers():
            for pid in self.pids_in(ns):
                proc.stop_pid(pid, timeout=3)
                removed.append(f"pid {pid} in {ns}")
            proc.run(["ip", "netns", "del", ns], check=False)
            removed.append(ns)
        # the ssh lab's control bridge (quicbed.testbed.sshlab) lives in the root namespace
        ctl = f"{self.prefix}ctl"
        if proc.run(["ip", "link", "show", ctl], check=False).returncode == 0:
            proc.run(["ip", "link", "del", ctl], check=False)
            removed.append(ctl)
        # netns deletion is asynchronous for the veths; wait until the kernel agrees.
        deadline = time.monotonic() + 5
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)
            removed.append(str(self.state_dir))
        removed += self._tracefs_leftovers()
        self._created = False
        return removed + self.cpu.remove()  # the CPU groups (quicbed.roles.cpuaccounting)

    def _tracefs_leftovers(self) -> list[str]:
        """The kernel trace instances of this prefix (quicbed-<prefix>, quicbed-<prefix>-*:
        the TCP tracer's, an Envoy arm's sender probe) that a killed run left behind;
        their events are switched off first, then the instance is removed."""
        root = Path("/sys/kernel/tracing/instances")
        found = [*root.glob(f"quicbed-{self.prefix}"), *root.glob(f"quicbed-{self.prefix}-*")]
        out = []
        for d in found:
            for f in (d / "tracing_on", d / "events" / "enable"):
                with contextlib.suppress(OSError):
                    f.write_text("0")
            with contextlib.suppress(OSError):
                d.rmdir()
                out.append(str(d))
        return out

    @staticmethod
    def pids_in(ns: str) -> list[int]:
        cp = proc.run(["ip", "netns", "pids", ns], check=False, timeout=10)
        return [int(x) for x in cp.stdout.split()]

    def status(self) -> dict[str, Any]:
        """What exists now, from the kernel: namespaces, links, addresses, processes, qdiscs."""
        info: dict[str, Any] = {"prefix": self.prefix, "kind": self.kind}
        present = self.leftovers()
        info["complete"] = len(present) == len(ROLES)
        roles: dict[str, object] = {}
        for role in ROLES:
            ns = self.ns(role)
            if ns not in present:
                roles[role] = None
                continue
            links = json.loads(proc.run(["ip", "-n", ns, "-json", "addr"]).stdout or "[]")
            qd = json.loads(
                proc.run(["ip", "netns", "exec", ns, "tc", "-json", "qdisc"]).stdout or "[]"
            )
            roles[role] = {
                "namespace": ns,
                "interfaces": {
                    lk["ifname"]: {
                        "state": lk.get("operstate"),
                        "addresses": [a["local"] for a in lk.get("addr_info", [])],
                    }
                    for lk in links
                    if lk["ifname"] != "lo"
                },
                "qdiscs": [f"{q['dev']}:{q['kind']}" for q in qd if q.get("dev") != "lo"],
                "pids": self.pids_in(ns),
            }
        info["roles"] = roles
        return info

    # --- running things ---------------------------------------------------------------
    def argv(self, role: str, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` on ``role``."""
        return ["ip", "netns", "exec", self.ns(role), *argv]

    def spawn(
        self,
        role: str,
        argv: Sequence[str],
        *,
        log: RPath | None = None,
        env: dict[str, str] | None = None,
        die_with_parent: bool = True,
    ) -> LocalProcess:
        """Start a daemon on ``role``; ``ip netns exec`` execs, so the PID is the daemon's.

        The cgroup join (quicbed.roles.cpuaccounting) goes in front of ``ip netns exec``, which
        mounts a sysfs of the namespace's own over /sys, without the cgroup hierarchies
        under it; it execs too, and the group is inherited across both."""
        path = Path(log) if log else None
        full_env = {**os.environ, **env} if env else None
        return LocalProcess(
            proc.spawn(
                self.cpu.wrap(role, self.argv(role, argv)),
                stdout=path,
                stderr=path,
                die_with_parent=die_with_parent,
                env=full_env,
            )
        )

    def alive(self, role: str, pid: int) -> bool:
        return proc.pid_alive(pid)

    def kill(self, role: str, pid: int, signal_name: str = "TERM") -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.Signals[f"SIG{signal_name}"])

    def stop_pid(self, role: str, pid: int, timeout: float = 5.0) -> None:
        proc.stop_pid(pid, timeout=timeout)  # also reaps it if it is our child

    def cpu_seconds(self, role: str, pid: int) -> float:
        return proc.cpu_seconds(pid)

    def workdir(self, role: str) -> RPath:
        """One folder for all roles (one file system): the testbed's state directory."""
        check_role(role)
        return RPath(self.state_dir)

    def repo_dir(self, role: str) -> RPath:
        return RPath(REPO_ROOT)

    def bin_path(self, role: str, name: str) -> RPath:
        return RPath(bin_path(name))

    def python(self, role: str) -> list[str]:
        return [sys.executable]

    # --- files (one file system) ------------------------------------------------------
    def local_stage(self, role: str, name: str) -> Path:
        """The role's own folder: made in place, nothing to copy."""
        d = Path(self.workdir(role)) / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def push(self, role: str, local: Path, remote: RPath, *, mode: int | None = None) -> None:
        dst = Path(remote)
        if dst.resolve() == local.resolve():
            return
        if local.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(local, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(local, dst)
            if mode is not None:
                dst.chmod(mode)

    def pull(self, role: str, remote: RPath, local: Path) -> None:
        src = Path(remote)
        if src.resolve() != local.resolve() and src.exists():
            shutil.copytree(src, local, dirs_exist_ok=True)

    def read_bytes(self, role: str, path: RPath, offset: int = 0) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""

    def size(self, role: str, path: RPath) -> int:
        try:
            return Path(path).stat().st_size
        except FileNotFoundError:
            return 0

    def write_text(self, role: str, path: RPath, text: str) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(p)

    def has_file(self, role: str, path: RPath) -> bool:
        return Path(path).exists()

    def remove(self, role: str, path: RPath) -> None:
        p = Path(path)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    def mkdir(self, role: str, path: RPath) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)

    # --- kernel settings --------------------------------------------------------------
    def host_sysctl(self, role: str, key: str, value: str | None = None) -> str:
        """Global keys live in the root namespace, shared by all three roles."""
        if value is not None:
            proc.run(["sysctl", "-q", "-w", f"{key}={value}"])
        return proc.run(["sysctl", "-n", key]).stdout.strip()

    def shares_clock(self) -> bool:
        return True  # one kernel

    def on_host(self, role: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """The root namespace: the role's namespace may not exist (yet, or any more)."""
        check_role(role)
        return proc.run(argv, check=False)
