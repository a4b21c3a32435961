"""Host tuning per condition: socket buffers of at least 2 x BDP, and the TCP CC in force.

``net.core.rmem_max``/``wmem_max`` are global (not per namespace) and only ever
raised; ``tcp_rmem``/``tcp_wmem`` and ``tcp_congestion_control`` are per namespace
and set on the server and the client. Everything is read back and recorded.
"""

from __future__ import annotations

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.link.model import LinkCondition
from quicbed.testbed.local import LocalTestbed

GLOBAL_KEYS = ("net.core.rmem_max", "net.core.wmem_max")
GLOBAL_RECORDED = (*GLOBAL_KEYS, "net.ipv4.tcp_allowed_congestion_control")
HOST_KEYS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control")


def _read_global(key: str) -> str:
    return proc.run(["sysctl", "-n", key]).stdout.strip()


def tune_hosts(tb: LocalTestbed, cond: LinkCondition, cc: str = "cubic") -> dict[str, object]:
    """Apply the tuning for ``cond`` and return what is really in force afterwards."""
    buf = cond.socket_buffer_bytes()
    for key in GLOBAL_KEYS:
        if int(_read_global(key)) < buf:
            proc.run(["sysctl", "-q", "-w", f"{key}={buf}"])
    available = _read_global("net.ipv4.tcp_available_congestion_control").split()
    if cc not in available:
        raise QuicbedError(
            f"congestion control {cc!r} is not available in this kernel "
            f"(available: {', '.join(available)})"
        )
    # A namespace may only pick a CC that the (global) allowed list names.
    allowed = _read_global("net.ipv4.tcp_allowed_congestion_control").split()
    if cc not in allowed:
        key = "net.ipv4.tcp_allowed_congestion_control"
        proc.run(["sysctl", "-q", "-w", f"{key}={' '.join([*allowed, cc])}"])
    for role in ("server", "client"):
        tb.sysctl(role, "net.ipv4.tcp_rmem", f"4096 131072 {buf}")
        tb.sysctl(role, "net.ipv4.tcp_wmem", f"4096 16384 {buf}")
        tb.sysctl(role, "net.ipv4.tcp_congestion_control", cc)
    return read_tuning(tb)


def read_tuning(tb: LocalTestbed) -> dict[str, object]:
    """The sysctls that matter, as the kernel reports them now (for receipts and provenance),
    and the NIC offloads of every veth end (``ethtool -k``, all off or this raises): the
    offloads decide whether the link sees real packets, so a package must show them."""
    out: dict[str, object] = {k: _read_global(k) for k in GLOBAL_RECORDED}
    for role in ("server", "client"):
        out[role] = {k: tb.read_sysctl(role, k) for k in HOST_KEYS}
    out["offloads"] = tb.check_offloads()
    return out
