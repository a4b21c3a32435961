"""The three roles of a testbed, and what the runner does on them.

A testbed gives the runner three roles (``server``, ``bridge``, ``client``) it can
run a command on, start a daemon on, and move files to and from. The runner, the
shapers, the probes, the servers and the browser use nothing else, so one cell
runs the same way on the local testbed (network namespaces on this machine) and on
the ssh testbed (three hosts: Emulab/CloudLab nodes, or the local namespaces with
sshd, which is how the ssh path is tested here).

Paths on a role are :class:`PurePosixPath` (``RPath``): they name files on that
role's machine, which is not the controller's for the ssh testbed. Local paths of
the controller (the results folder) are :class:`pathlib.Path`.

This module is the interface alone, without a testbed's life (up, down, owned, torn
down: quicbed.testbed.lifecycle): the link's shapers (quicbed.shapers) act on the
roles, and a testbed's teardown clears their shaping: the shapers sit between the two
modules, and no import goes round in a circle.
"""

from __future__ import annotations

import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path, PurePosixPath

from quicbed import proc
from quicbed.backends import Backend
from quicbed.errors import QuicbedError
from quicbed.roles import ROLES
from quicbed.roles.cpuaccounting import CpuGroups

#: the experiment network's fixed addresses (also in profile.py, which cannot import us)
SERVER_IP = "10.10.1.1"
CLIENT_IP = "10.10.1.2"
PREFIX_LEN = 24

RPath = PurePosixPath


def check_role(role: str) -> str:
    if role not in ROLES:
        raise QuicbedError(f"unknown testbed role {role!r} (one of {', '.join(ROLES)})")
    return role


class Process(ABC):
    """A daemon started on a role, stopped by its own PID (never a global pkill)."""

    pid: int

    @abstractmethod
    def poll(self) -> int | None:
        """None while it runs, else its exit code (-1 where the code is unknown)."""

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if time.monotonic() > deadline:
                raise QuicbedError(f"process {self.pid} still runs after {timeout:g} s")
            time.sleep(0.05)
        return rc

    @abstractmethod
    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, wait, then SIGKILL; a no-op once it has exited."""


class Roles(Backend):
    """Three roles, and the few operations the runner needs on them; what the testbed's
    kind can do (``one_machine``, ``makes_namespaces``, ...) is its Backend's
    (quicbed.backends)."""

    prefix: str
    server_ip: str
    client_ip: str

    @abstractmethod
    def name(self, role: str) -> str:
        """How error messages name a role (a namespace, or a host)."""

    @cached_property
    def cpu(self) -> CpuGroups:
        """The control groups that account CPU per role (quicbed.roles.cpuaccounting): every
        ``spawn`` joins the one the runner made active for its role."""
        return CpuGroups(self)

    # --- running things ---------------------------------------------------------------
    @abstractmethod
    def argv(self, role: str, argv: Sequence[str]) -> list[str]:
        """The controller's command line that runs ``argv`` on ``role`` (stdin/stdout pass)."""

    def exec(
        self,
        role: str,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return proc.run(self.argv(role, argv), timeout=timeout, check=check, input=input)

    @abstractmethod
    def spawn(
        self,
        role: str,
        argv: Sequence[str],
        *,
        log: RPath | None = None,
        env: dict[str, str] | None = None,
        die_with_parent: bool = True,
    ) -> Process:
        """Start a daemon on ``role``; stdout and stderr go to ``log`` on that role.

        ``env`` holds only the variables to add. ``die_with_parent`` asks that the
        daemon ends with quicbed (locally by PR_SET_PDEATHSIG; a remote daemon is
        found again by ``down`` instead).
        """

    @abstractmethod
    def alive(self, role: str, pid: int) -> bool: ...

    @abstractmethod
    def kill(self, role: str, pid: int, signal_name: str = "TERM") -> None: ...

    def stop_pid(self, role: str, pid: int, timeout: float = 5.0) -> None:
        """Stop one process on ``role`` by PID: SIGTERM, wait, then SIGKILL."""
        self.kill(role, pid, "TERM")
        deadline = time.monotonic() + timeout
        while self.alive(role, pid):
            if time.monotonic() > deadline:
                self.kill(role, pid, "KILL")
                break
            time.sleep(0.05)

    @abstractmethod
    def cpu_seconds(self, role: str, pid: int) -> float:
        """User + system CPU time of a process on ``role`` (emulator CPU in receipts)."""

    @abstractmethod
    def workdir(self, role: str) -> RPath:
        """A directory of this testbed's on ``role``'s machine for state and scratch files."""

    @abstractmethod
    def repo_dir(self, role: str) -> RPath:
        """The quicbed checkout on ``role``'s machine (client/load.js, build/bin)."""

    @abstractmethod
    def bin_path(self, role: str, name: str) -> RPath:
        """One of quicbed's Go binaries on ``role``; raises if it is not built there."""

    @abstractmethod
    def python(self, role: str) -> list[str]:
        """argv prefix that runs a quicbed module with ``-m`` on ``role``."""

    # --- files ------------------------------------------------------------------------
    @abstractmethod
    def push(self, role: str, local: Path, remote: RPath, *, mode: int | None = None) -> None:
        """Copy a local file or folder to ``remote`` on ``role`` (replacing it)."""

    @abstractmethod
    def pull(self, role: str, remote: RPath, local: Path) -> None:
        """Copy a folder of ``role`` into the local folder ``local`` (merging)."""

    @abstractmethod
    def read_bytes(self, role: str, path: RPath, offset: int = 0) -> bytes:
        """A file's content from ``offset``; empty if the file does not exist."""

    @abstractmethod
    def write_text(self, role: str, path: RPath, text: str) -> None:
        """Write a file atomically (parents made as needed)."""

    @abstractmethod
    def has_file(self, role: str, path: RPath) -> bool: ...

    @abstractmethod
    def remove(self, role: str, path: RPath) -> None:
        """Remove a file or folder; no error if it is not there."""

    def read_text(self, role: str, path: RPath) -> str:
        return self.read_bytes(role, path).decode(errors="replace")

    def size(self, role: str, path: RPath) -> int:
        return len(self.read_bytes(role, path))

    def mkdir(self, role: str, path: RPath) -> None:
        self.exec(role, ["mkdir", "-p", str(path)])

    def outbox(self, role: str, local: Path) -> RPath:
        """Where ``role`` writes files that belong in the local folder ``local``.

        Locally the role writes there directly (a crash loses nothing); on a remote
        host they wait in the outbox until :meth:`collect` brings them home.
        """
        local.mkdir(parents=True, exist_ok=True)
        return RPath(local)

    def collect(self, role: str, local: Path) -> None:
        """Bring ``role``'s outbox for ``local`` home (a no-op where it is ``local``)."""
        return None

    # --- kernel settings --------------------------------------------------------------
    def sysctl(self, role: str, key: str, value: str) -> None:
        """A per-namespace (per-host) sysctl on ``role``."""
        self.exec(role, ["sysctl", "-q", "-w", f"{key}={value}"])

    def read_sysctl(self, role: str, key: str) -> str:
        return self.exec(role, ["sysctl", "-n", key]).stdout.strip()

    def host_sysctl(self, role: str, key: str, value: str | None = None) -> str:
        """Read (and with ``value`` set) a sysctl that is global to ``role``'s host, not
        per network namespace (``net.core.rmem_max``, the allowed CC list)."""
        if value is not None:
            self.sysctl(role, key, value)
        return self.read_sysctl(role, key)

    def shares_clock(self) -> bool:
        """True if server and client read one CLOCK_MONOTONIC, so one-way delays can be
        measured by subtracting timestamps (one kernel: the same boot id)."""
        ids = {
            self.read_text(r, RPath("/proc/sys/kernel/random/boot_id")).strip()
            for r in ("server", "client")
        }
        return len(ids) == 1 and "" not in ids

    def on_host(self, role: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``role``'s machine in its own (root) namespace, unchecked: for
        what belongs to the machine, not to the role's network (control groups)."""
        return self.exec(role, argv, check=False)

    def on_bridge_host(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the bridge machine's own (root) namespace, unchecked."""
        return self.on_host("bridge", argv)

    def listening(self, role: str, proto: str, port: int) -> bool:
        """True if something listens on ``proto``/``port`` on ``role`` (asks ss)."""
        flag = "-lnu" if proto == "udp" else "-lnt"
        out = self.exec(role, ["ss", "-H", flag, f"sport = :{port}"], check=False).stdout
        return bool(out.strip())

    def wait_listening(self, role: str, proto: str, port: int, timeout: float = 10) -> None:
        """Wait until something listens on ``port`` on ``role`` (ss, not sleep)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.listening(role, proto, port):
                return
            time.sleep(0.02)
        raise QuicbedError(
            f"nothing listened on {proto}/{port} on {self.name(role)} after {timeout:g} s"
        )
