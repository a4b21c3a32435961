"""Provenance: what software and machine produced a result, stored with every attempt.

Collected from the programs themselves (``--version`` and build info), never typed
in: a replication package must say what really ran. Everything here is cheap (one
``--version`` per program, files under /proc): it runs once per attempt. On the ssh
testbed each component is asked on the host it runs on (Chromium on the client,
Apache on the server), and every host's kernel, OS, CPU and sysctls are recorded.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from quicbed import __version__
from quicbed.errors import QuicbedError
from quicbed.paths import REPO_ROOT

if TYPE_CHECKING:
    from quicbed.testbed.base import Testbed

#: runs a command where a component lives; its output, or None if it failed
Run = Callable[[list[str]], str | None]


def _out(argv: list[str], timeout: float = 20) -> str | None:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    text = (cp.stdout or cp.stderr).strip()
    return text if cp.returncode == 0 and text else None


def _git_now() -> dict[str, Any]:
    sha = _out(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"])
    dirty = _out(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"sha": sha, "dirty": bool(dirty)}


@functools.cache
def _git_at_start() -> dict[str, Any]:
    return _git_now()


def git_state() -> dict[str, Any]:
    """The checkout as this process first saw it: the code it loaded and runs. A commit
    or an edit during a sweep of hours does not relabel its later cells' software;
    where the checkout moved since, ``now`` says where to (the cell still ran the
    code of ``sha``, unless a module was first imported after the move)."""
    start = _git_at_start()
    now = _git_now()
    return dict(start) if now == start else start | {"now": now}


def _on(tb: Testbed | None, role: str) -> Run:
    """How to ask ``role``'s machine: this one for the local testbed, else over the testbed."""
    if tb is None or tb.kind == "local":
        return _out

    def run(argv: list[str]) -> str | None:
        try:
            cp = tb.exec(role, argv, check=False, timeout=30)
        except QuicbedError:
            return None
        text = (cp.stdout or cp.stderr).strip()
        return text if cp.returncode == 0 and text else None

    return run


def _go_binary(path: PurePosixPath, run: Run = _out) -> dict[str, Any] | None:
    """Go version and module versions compiled into one of our binaries."""
    if run(["ls", str(path)]) is None:
        return None
    text = run(["go", "version", "-m", str(path)]) or run(
        ["/usr/local/go/bin/go", "version", "-m", str(path)]
    )
    if not text:
        return {"path": str(path)}
    first, *rest = text.splitlines()
    info: dict[str, Any] = {"path": str(path), "go": first.rsplit(":", 1)[-1].strip(), "deps": {}}
    last = None
    for line in rest:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "dep":
            info["deps"][parts[1]] = parts[2]
            last = parts[1]
        elif len(parts) >= 2 and parts[0] == "=>" and last:
            # a replaced module (quic-go with go/patches): the patched copy is another
            # program than the release, so attempts built from each never pool
            info["deps"][last] += f" => {PurePosixPath(parts[1]).name}"
        elif len(parts) >= 2 and parts[0] == "build" and parts[1].startswith("vcs."):
            key, _, val = parts[1].partition("=")
            info[key.replace(".", "_")] = val
    return info


def software(tb: Testbed | None = None) -> dict[str, Any]:
    """Versions of every component that touches a measurement, asked where it runs."""
    server, client, bridge = _on(tb, "server"), _on(tb, "client"), _on(tb, "bridge")

    def bindir(role: str) -> PurePosixPath:
        repo = PurePosixPath(REPO_ROOT) if tb is None else tb.repo_dir(role)
        return repo / "build" / "bin"

    chromium = client(["chromium", "--version"])
    apache = server(["apache2", "-v"])
    iperf = client(["iperf3", "--version"])
    node = client(["node", "--version"])
    return {
        "quicbed": __version__,
        "python": sys.version.split()[0],
        "chromium": chromium,
        "apache": m.group(0) if apache and (m := re.search(r"Apache/[\d.]+", apache)) else None,
        "iperf3": iperf.splitlines()[0] if iperf else None,
        "node": node,
        "quicbed-h3server": _go_binary(bindir("server") / "quicbed-h3server", server),
        "quicbed-linkem": _go_binary(bindir("bridge") / "quicbed-linkem", bridge),
    }


#: host sysctls (root network namespace) that shape TCP and UDP behaviour; the values
#: set per testbed namespace are read back into each fidelity receipt (``tuning``)
SYSCTLS = (
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
    "net.core.default_qdisc",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_fastopen",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.udp_rmem_min",
    "net.ipv4.udp_wmem_min",
)


def sysctls() -> dict[str, str | None]:
    """The host's values of :data:`SYSCTLS`, read from /proc/sys (no subprocess)."""
    out: dict[str, str | None] = {}
    for key in SYSCTLS:
        try:
            text = (Path("/proc/sys") / key.replace(".", "/")).read_text()
            out[key] = " ".join(text.split())
        except OSError:
            out[key] = None
    return out


def python_packages() -> dict[str, str]:
    """Every installed Python distribution and its version (what ``pip freeze`` says),
    read from package metadata: a replication needs the versions that really ran,
    which may differ from requirements.txt."""
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def machine(run: Run | None = None) -> dict[str, Any]:
    """This machine (or, with ``run``, the machine ``run`` asks: a testbed host)."""
    if run is None:
        return {
            "hostname": platform.node(),
            "kernel": platform.release(),
            "os": _os_release(_read("/etc/os-release")),
            "cpu": _cpu(_read("/proc/cpuinfo")),
            "cores": _out(["nproc"]),
        }
    return {
        "hostname": run(["uname", "-n"]),
        "kernel": run(["uname", "-r"]),
        "os": _os_release(run(["cat", "/etc/os-release"])) or run(["uname", "-sr"]),
        "cpu": _cpu(run(["cat", "/proc/cpuinfo"])) or run(["sysctl", "-n", "hw.model"]),
        "cores": run(["nproc"]) or run(["sysctl", "-n", "hw.ncpu"]),
        # Emulab writes the node's hardware type here (d430, d710, ...)
        "node_type": run(["cat", "/var/emulab/boot/nodetype"]),
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _cpu(cpuinfo: str | None) -> str | None:
    for line in (cpuinfo or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def _os_release(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return None


def node_sysctls(run: Run) -> dict[str, str | None]:
    """:data:`SYSCTLS` on a testbed host, in one call (``-e``: unknown keys are skipped)."""
    text = run(["sysctl", "-e", *SYSCTLS]) or ""
    found = {}
    for line in text.splitlines():
        key, sep, val = line.partition(" = ")
        if sep:
            found[key.strip()] = " ".join(val.split())
    return {k: found.get(k) for k in SYSCTLS}


def collect(tb: Testbed | None = None) -> dict[str, Any]:
    """Everything about what produced an attempt; ``tb`` adds the testbed and its hosts."""
    out: dict[str, Any] = {
        "collected": datetime.now(UTC).isoformat(),
        "git": git_state(),
        "software": software(tb),
        "machine": machine(),
        "sysctls": sysctls(),
        "python_packages": python_packages(),
        "argv": sys.argv,
    }
    if tb is not None:
        out["testbed"] = tb.describe()
        if tb.kind != "local":  # the controller is not where the measurement ran
            out["nodes"] = {}
            for role in ("server", "client", "bridge"):
                run = _on(tb, role)
                out["nodes"][role] = {"machine": machine(run), "sysctls": node_sysctls(run)}
    return out
