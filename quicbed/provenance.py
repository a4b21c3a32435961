"""Provenance: what software and machine produced a result, stored with every attempt.

Collected from the programs themselves (``--version`` and build info), never typed
in: a replication package must say what really ran. Everything here is cheap (one
``--version`` per program, files under /proc): it runs once per attempt.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed import __version__
from quicbed.paths import REPO_ROOT


def _out(argv: list[str], timeout: float = 20) -> str | None:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    text = (cp.stdout or cp.stderr).strip()
    return text if cp.returncode == 0 and text else None


def git_state() -> dict[str, Any]:
    sha = _out(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"])
    dirty = _out(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"sha": sha, "dirty": bool(dirty)}


def _go_binary(path: Path) -> dict[str, Any] | None:
    """Go version and module versions compiled into one of our binaries."""
    if not path.exists():
        return None
    text = _out(["go", "version", "-m", str(path)]) or _out(
        ["/usr/local/go/bin/go", "version", "-m", str(path)]
    )
    if not text:
        return {"path": str(path)}
    first, *rest = text.splitlines()
    info: dict[str, Any] = {"path": str(path), "go": first.rsplit(":", 1)[-1].strip(), "deps": {}}
    for line in rest:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "dep":
            info["deps"][parts[1]] = parts[2]
        elif len(parts) >= 2 and parts[0] == "build" and parts[1].startswith("vcs."):
            key, _, val = parts[1].partition("=")
            info[key.replace(".", "_")] = val
    return info


def software() -> dict[str, Any]:
    """Versions of every component that touches a measurement."""
    bindir = REPO_ROOT / "build" / "bin"
    chromium = _out(["chromium", "--version"])
    apache = _out(["apache2", "-v"])
    iperf = _out(["iperf3", "--version"])
    node = _out(["node", "--version"])
    return {
        "quicbed": __version__,
        "python": sys.version.split()[0],
        "chromium": chromium,
        "apache": re.search(r"Apache/[\d.]+", apache).group(0) if apache else None,
        "iperf3": iperf.splitlines()[0] if iperf else None,
        "node": node,
        "quicbed-h3server": _go_binary(bindir / "quicbed-h3server"),
        "quicbed-linkem": _go_binary(bindir / "quicbed-linkem"),
    }


#: host sysctls (root network namespace) that shape TCP and UDP behaviour; the values
#: set per testbed namespace are read back into each fidelity receipt (``tuning``)
SYSCTLS = (
    "net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default", "net.core.wmem_default",
    "net.core.default_qdisc", "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_sack", "net.ipv4.tcp_ecn", "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_fastopen", "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_no_metrics_save", "net.ipv4.tcp_mtu_probing", "net.ipv4.udp_rmem_min",
    "net.ipv4.udp_wmem_min",
)  # fmt: skip


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


def machine() -> dict[str, Any]:
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "os": _os_release(),
        "cpu": cpu,
        "cores": _out(["nproc"]),
    }


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None


def collect() -> dict[str, Any]:
    return {
        "collected": datetime.now(UTC).isoformat(),
        "git": git_state(),
        "software": software(),
        "machine": machine(),
        "sysctls": sysctls(),
        "python_packages": python_packages(),
        "argv": sys.argv,
    }
