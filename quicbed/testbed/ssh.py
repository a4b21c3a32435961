"""The ssh testbed: the three roles on three hosts, driven over SSH.

The hosts are Emulab/CloudLab nodes made by ``profile.py`` (or any three hosts an
Ansible inventory names, or the local namespaces running sshd: ``quicbed testbed
up --sshd``, which is how this backend is tested here). Provisioning is Ansible
(``playbooks/site.yml``); run-time control is plain SSH, one multiplexed connection
per host (ControlMaster), because an Ansible task per command would be far too slow.

A daemon started on a host does not die with quicbed as a local child does: its
PID is recorded in the host's work folder, and ``up`` and ``down`` stop whatever an
earlier, crashed run left there. Files a role writes for the results folder wait
in the role's outbox until the cell collects them.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shlex
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.backends import SshBackend
from quicbed.errors import QuicbedError
from quicbed.tarsafe import safe_extract
from quicbed.testbed.hosts import Node, read_nodes
from quicbed.testbed.lifecycle import (
    CLIENT_IP,
    ROLES,
    SERVER_IP,
    Process,
    RPath,
    Testbed,
    check_role,
)

CONNECT_TIMEOUT_S = 10


class SshProcess(Process):
    """A daemon on a host, known by its PID there (and recorded in the work folder)."""

    def __init__(self, tb: SshTestbed, role: str, pid: int) -> None:
        self.tb, self.role, self.pid = tb, role, pid
        self._rc: int | None = None

    def poll(self) -> int | None:
        if self._rc is None and not self.tb.alive(self.role, self.pid):
            self._rc = -1  # its parent there (init) reaped it: the code is not ours to read
        return self._rc

    def stop(self, timeout: float = 5.0) -> None:
        if self.poll() is None:
            self.tb.stop_pid(self.role, self.pid, timeout=timeout)
        self.tb.forget(self.role, self.pid)


@dataclass
class SshTestbed(SshBackend, Testbed):
    """Three hosts, one SSH connection each (reused); commands run there as root via sudo."""

    nodes: dict[str, Node]
    prefix: str = "ssh"
    source: str = ""  # the inventory or manifest the nodes came from
    server_ip: str = field(init=False)
    client_ip: str = field(init=False)

    def __post_init__(self) -> None:
        missing = [r for r in ROLES if r not in self.nodes]
        if missing:
            raise QuicbedError(
                f"ssh testbed{' ' + self.source if self.source else ''}: no host for role(s) "
                f"{', '.join(missing)}"
            )
        self.server_ip = self.nodes["server"].exp_ip or SERVER_IP
        self.client_ip = self.nodes["client"].exp_ip or CLIENT_IP
        key = hashlib.sha256(repr(sorted((r, n.address) for r, n in self.nodes.items())).encode())
        # ControlPath must fit a unix socket name (108 bytes): short and per user. Per
        # hosts file and key too: a master left by a killed run to hosts that are gone
        # (a lab torn down, a node reimaged) would swallow a new testbed's sessions at
        # the same addresses until its keep-alives give up
        conn = hashlib.sha256(
            repr(
                (key.hexdigest(), self.source, sorted(str(n.key) for n in self.nodes.values()))
            ).encode()
        )
        self._control = Path(tempfile.gettempdir()) / f"qbssh-{os.getuid()}-{conn.hexdigest()[:8]}"
        self._lock = (
            Path(tempfile.gettempdir()) / "quicbed-locks" / f"ssh-{key.hexdigest()[:16]}.lock"
        )
        self._bins: dict[tuple[str, str], RPath] = {}

    @classmethod
    def load(cls, path: Path, *, user: str | None = None, key: Path | None = None) -> SshTestbed:
        """The ssh testbed that ``path`` (an inventory or a manifest) describes.

        ``user`` and ``key`` override what the file says (a manifest lists every
        project member's login; the portal's default key is the user's own).
        """
        return cls(read_nodes(path, user=user, key=key), source=str(path))

    @classmethod
    def from_options(
        cls, *, prefix: str, hosts: str | None, user: str | None, key: str | None
    ) -> SshTestbed:
        """The hosts a file names (``--hosts``), logged in as ``--ssh-user`` with
        ``--ssh-key`` where given."""
        if not hosts:
            raise QuicbedError(f"--testbed {cls.kind} needs --hosts (an inventory or a manifest)")
        return cls.load(Path(hosts), user=user, key=Path(key).expanduser() if key else None)

    def lock_path(self) -> Path:
        """On the controller, per set of hosts, in a folder every user may lock in (like
        /tmp itself): two users' commands on the same hosts must see each other."""
        d = self._lock.parent
        if not d.exists():
            d.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                d.chmod(0o1777)
        return self._lock

    def describe_short(self) -> str:
        return self.source or ",".join(n.address for n in self.nodes.values())

    # --- names ------------------------------------------------------------------------
    def name(self, role: str) -> str:
        return f"{role} ({self.nodes[check_role(role)].address})"

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "prefix": self.prefix,
            "source": self.source,
            "nodes": {
                r: {
                    "host": n.host,
                    "port": n.port,
                    "user": n.user,
                    "exp_ip": n.exp_ip,
                    "repo_dir": str(n.repo_dir),
                    "workdir": str(n.workdir),
                    "sudo": n.sudo,
                    "hardware_type": n.hardware_type,
                    "image": n.image,
                }
                for r, n in self.nodes.items()
            },
        }

    # --- ssh --------------------------------------------------------------------------
    def _ssh(self, role: str, *, stdin: bool) -> list[str]:
        n = self.nodes[check_role(role)]
        self._control.mkdir(mode=0o700, exist_ok=True)
        # the user's own options first: for ssh the first value of an option wins
        argv = [
            "ssh",
            *n.ssh_args,
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self._control}/%C",
            "-o",
            "ControlPersist=60",
            "-o",
            f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            "LogLevel=ERROR",
            "-p",
            str(n.port),
        ]
        if n.key is not None:
            argv += ["-i", str(n.key), "-o", "IdentitiesOnly=yes"]
        if not stdin:
            argv.append("-n")
        argv.append(f"{n.user}@{n.host}" if n.user else n.host)
        return argv

    def _remote(self, role: str, argv: Sequence[str]) -> str:
        cmd = list(argv)
        if self.nodes[role].sudo:
            cmd = ["sudo", "-n", *cmd]
        return shlex.join(cmd)

    def argv(self, role: str, argv: Sequence[str]) -> list[str]:
        return [*self._ssh(role, stdin=True), "--", self._remote(role, argv)]

    def _sh(self, role: str, script: str, *, stdin: bool = False) -> list[str]:
        return [*self._ssh(role, stdin=stdin), "--", self._remote(role, ["sh", "-c", script])]

    def exec(
        self,
        role: str,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full = [*self._ssh(role, stdin=input is not None), "--", self._remote(role, argv)]
        cp = proc.run(full, timeout=timeout, check=False, input=input)
        if cp.returncode == 255:  # ssh's own failure, not the command's
            raise QuicbedError(f"cannot reach {self.name(role)}: {_tail(cp.stderr)}")
        if check and cp.returncode != 0:
            raise QuicbedError(
                f"on {self.name(role)}: command failed (exit {cp.returncode}): "
                f"{shlex.join(argv)}: {_tail(cp.stderr or cp.stdout)}"
            )
        return cp

    def _sh_bytes(
        self, role: str, script: str, *, input: bytes | None = None, timeout: float = 60
    ) -> bytes:
        cp = proc.run_bytes(
            self._sh(role, script, stdin=input is not None), input=input, timeout=timeout
        )
        if cp.returncode != 0:
            err = cp.stderr.decode(errors="replace")
            where = "cannot reach" if cp.returncode == 255 else "failed on"
            raise QuicbedError(f"{where} {self.name(role)}: {script[:80]}: {_tail(err)}")
        return cp.stdout

    def close(self) -> None:
        """End the shared connections (they would otherwise linger for ControlPersist)."""
        for role in ROLES:
            with contextlib.suppress(QuicbedError):
                proc.run(
                    [
                        *self._ssh(role, stdin=False)[:-1],
                        "-O",
                        "exit",
                        self._ssh(role, stdin=False)[-1],
                    ],
                    timeout=10,
                    check=False,
                )

    # --- lifecycle --------------------------------------------------------------------
    def up(self) -> bool:
        """Reach every host, make its work folder, stop what a crashed run left there.

        Returns False: the hosts exist before quicbed and outlive it.
        """
        for role in ROLES:
            self.exec(role, ["true"])
            self.mkdir(role, self._pids(role))
            self._stop_recorded(role)
        return False

    def down(self) -> list[str]:
        """Stop every daemon quicbed started on the hosts; remove the work folders and
        the CPU groups (quicbed.roles.cpuaccounting)."""
        removed: list[str] = []
        for role in ROLES:
            removed += self._stop_recorded(role)
            self.remove(role, self.nodes[role].workdir)
            removed.append(f"{self.name(role)}:{self.nodes[role].workdir}")
        return removed + self.cpu.remove()

    def status(self) -> dict[str, Any]:
        info: dict[str, Any] = {"prefix": self.prefix, "kind": self.kind, "source": self.source}
        roles: dict[str, Any] = {}
        for role in ROLES:
            try:
                host = self.exec(role, ["uname", "-snr"]).stdout.strip()
                pids = [p for p in self._recorded(role) if self.alive(role, p)]
                roles[role] = {
                    "address": self.nodes[role].address,
                    "reachable": True,
                    "system": host,
                    "pids": pids,
                }
            except QuicbedError as exc:
                roles[role] = {
                    "address": self.nodes[role].address,
                    "reachable": False,
                    "error": str(exc),
                }
        info["roles"] = roles
        info["complete"] = all(r["reachable"] for r in roles.values())
        return info

    def offload_interfaces(self) -> dict[str, tuple[str, ...]]:
        """The endpoints' experiment interfaces (the bridge node's ports are its own: a
        cell's offloads are set on the endpoints only)."""
        return {
            role: (self.experiment_interface(role, ip),)
            for role, ip in (("server", self.server_ip), ("client", self.client_ip))
        }

    def check_offloads(
        self, expected: Mapping[str, str] | None = None
    ) -> dict[str, dict[str, str]]:
        """Offloads of the endpoints' experiment interfaces, recorded (real NICs segment
        on the wire, so unlike veths they need not be off); a cell's ``expected`` ones
        must read back as set."""
        from quicbed.roles import offloads

        seen = offloads.read_all(self)
        bad = offloads.differences(expected or {}, seen)
        if bad:
            raise QuicbedError("; ".join(bad))
        return {
            iface: {offloads.FEATURES[k]: v for k, v in feats.items()}
            for iface, feats in seen.items()
        }

    def experiment_interface(self, role: str, ip: str) -> str:
        """The interface that holds ``ip`` on ``role`` (Emulab names them per node)."""
        out = self.exec(role, ["ip", "-o", "-4", "addr", "show"], check=False).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) > 3 and f[3].split("/")[0] == ip:
                return f[1]
        raise QuicbedError(f"no interface holds the experiment address {ip} on {self.name(role)}")

    # --- daemons ----------------------------------------------------------------------
    def _pids(self, role: str) -> RPath:
        return self.nodes[role].workdir / "pids"

    def _recorded(self, role: str) -> list[int]:
        out = self.exec(role, ["ls", str(self._pids(role))], check=False).stdout
        return [int(x) for x in out.split() if x.isdigit()]

    def _stop_recorded(self, role: str) -> list[str]:
        """Stop daemons an earlier run recorded, if their command line still matches
        (a PID can be reused by an unrelated process after a reboot)."""
        stopped = []
        for pid in self._recorded(role):
            want = self.read_text(role, self._pids(role) / str(pid)).strip()
            now = self.exec(role, ["ps", "-o", "args=", "-p", str(pid)], check=False).stdout
            if want and now.strip().startswith(want):
                self.stop_pid(role, pid)
                stopped.append(f"pid {pid} on {self.name(role)}")
            self.forget(role, pid)
        return stopped

    def forget(self, role: str, pid: int) -> None:
        self.remove(role, self._pids(role) / str(pid))

    def spawn(
        self,
        role: str,
        argv: Sequence[str],
        *,
        log: RPath | None = None,
        env: dict[str, str] | None = None,
        die_with_parent: bool = True,
    ) -> SshProcess:
        """nohup'd on the host with its output in ``log``; its PID recorded for ``down``
        under the program's own name (the cgroup join in front of it execs it:
        quicbed.roles.cpuaccounting)."""
        joined = self.cpu.wrap(role, argv)
        cmd = shlex.join(["env", *(f"{k}={v}" for k, v in (env or {}).items()), *joined])
        out = shlex.quote(str(log)) if log else "/dev/null"
        pids = shlex.quote(str(self._pids(role)))
        made = f"mkdir -p {shlex.quote(str(log.parent))} && " if log else ""
        # only nohup goes to the background (an &-ed list would be a subshell's PID)
        name = shlex.quote(argv[0])
        script = (
            f"{made}mkdir -p {pids} && cd / || exit 1; nohup {cmd} >{out} 2>&1 "
            f"</dev/null & p=$!; echo {name} >{pids}/$p; echo $p"
        )
        pid = self._sh_bytes(role, script).decode().strip()
        if not pid.isdigit():
            raise QuicbedError(f"could not start {argv[0]} on {self.name(role)}: {pid!r}")
        return SshProcess(self, role, int(pid))

    def alive(self, role: str, pid: int) -> bool:
        """``pid`` exists on the host and is not a zombie, as locally (proc.pid_alive): a
        daemon whose shell exited is reaped by the host's init, which some hosts' inits
        (a sandbox's) do only after a second or more, and every wait on it would wait
        that long. ``ps -o stat=`` reads the state on Linux and on a FreeBSD bridge; a
        host without ``ps`` is asked ``kill -0`` (a zombie counts as alive there)."""
        p = int(pid)
        script = (
            f'if command -v ps >/dev/null; then st=$(ps -o stat= -p {p}) && case "$st" in '
            f"*Z*) exit 1;; esac; else kill -0 {p}; fi"
        )
        return self.exec(role, ["sh", "-c", script], check=False).returncode == 0

    def kill(self, role: str, pid: int, signal_name: str = "TERM") -> None:
        self.exec(role, ["kill", f"-{signal_name}", str(pid)], check=False)

    def cpu_seconds(self, role: str, pid: int) -> float:
        out = self._sh_bytes(role, f"getconf CLK_TCK; cat /proc/{int(pid)}/stat").decode()
        ticks, stat = out.split("\n", 1)
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / int(ticks)

    # --- where things are -------------------------------------------------------------
    def workdir(self, role: str) -> RPath:
        return self.nodes[check_role(role)].workdir

    def repo_dir(self, role: str) -> RPath:
        return self.nodes[check_role(role)].repo_dir

    def bin_path(self, role: str, name: str) -> RPath:
        if (role, name) not in self._bins:
            path = self.repo_dir(role) / "build" / "bin" / name
            if self.exec(role, ["test", "-x", str(path)], check=False).returncode != 0:
                raise QuicbedError(
                    f"{name} is not built at {path} on {self.name(role)} (provision the node: "
                    "playbooks/site.yml)"
                )
            self._bins[(role, name)] = path
        return self._bins[(role, name)]

    def python(self, role: str) -> list[str]:
        n = self.nodes[check_role(role)]
        return ["env", f"PYTHONPATH={n.repo_dir}", n.python]

    # --- files ------------------------------------------------------------------------
    def push(self, role: str, local: Path, remote: RPath, *, mode: int | None = None) -> None:
        r = shlex.quote(str(remote))
        if local.is_dir():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tf:
                tf.add(local, arcname=".")
            data = buf.getvalue()
            script = f"rm -rf {r} && mkdir -p {r} && tar -C {r} -xf -"
        else:
            data = local.read_bytes()
            chmod = f" && chmod {mode:o} {r}.tmp" if mode is not None else ""
            script = (
                f"mkdir -p {shlex.quote(str(remote.parent))} && cat >{r}.tmp{chmod} "
                f"&& mv {r}.tmp {r}"
            )
        self._sh_bytes(role, script, input=data, timeout=300)

    def pull(self, role: str, remote: RPath, local: Path) -> None:
        r = shlex.quote(str(remote))
        data = self._sh_bytes(role, f"if [ -d {r} ]; then tar -C {r} -cf - .; fi", timeout=300)
        if not data:
            return
        local.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tf:
            safe_extract(tf, local, what=f"{self.name(role)}:{remote}")

    def read_bytes(self, role: str, path: RPath, offset: int = 0) -> bytes:
        p = shlex.quote(str(path))
        return self._sh_bytes(role, f"if [ -f {p} ]; then tail -c +{int(offset) + 1} {p}; fi")

    def size(self, role: str, path: RPath) -> int:
        p = shlex.quote(str(path))
        out = self._sh_bytes(role, f"if [ -f {p} ]; then wc -c <{p}; else echo 0; fi")
        return int(out.split()[0])

    def write_text(self, role: str, path: RPath, text: str) -> None:
        p = shlex.quote(str(path))
        self._sh_bytes(
            role,
            f"mkdir -p {shlex.quote(str(path.parent))} && cat >{p}.tmp && mv {p}.tmp {p}",
            input=text.encode(),
        )

    def has_file(self, role: str, path: RPath) -> bool:
        return self.exec(role, ["test", "-e", str(path)], check=False).returncode == 0

    def remove(self, role: str, path: RPath) -> None:
        if str(path) in ("/", ""):
            raise QuicbedError(f"refusing to remove {path!r} on {self.name(role)}")
        self.exec(role, ["rm", "-rf", str(path)])

    def outbox(self, role: str, local: Path) -> RPath:
        key = hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:16]
        box = self.workdir(role) / "outbox" / key
        self.mkdir(role, box)
        return box

    def collect(self, role: str, local: Path) -> None:
        key = hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:16]
        box = self.workdir(role) / "outbox" / key
        self.pull(role, box, local)
        self.remove(role, box)


def _tail(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return " | ".join(lines[-3:]) or "no output"
