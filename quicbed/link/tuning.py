"""Host tuning per condition: socket buffers of at least 2 x BDP, and the TCP CC in force.

``net.core.rmem_max``/``wmem_max`` and the allowed CC list are global to a host
(not per namespace) and only ever raised or extended; ``tcp_rmem``/``tcp_wmem``
and ``tcp_congestion_control`` are per namespace. Both are set on the server and
the client (on the local testbed both share one host). Everything is read back
and recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.testbed.lifecycle import Testbed

GLOBAL_KEYS = ("net.core.rmem_max", "net.core.wmem_max")
GLOBAL_RECORDED = (*GLOBAL_KEYS, "net.ipv4.tcp_allowed_congestion_control")
HOST_KEYS = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control")
ENDPOINTS = ("server", "client")


def tune_hosts(
    tb: Testbed,
    cond: LinkCondition,
    cc: str = "cubic",
    offloads: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Apply the tuning for ``cond`` and return what is really in force afterwards
    (``offloads``: the cell's, already set by the link: quicbed.link.session)."""
    buf = cond.socket_buffer_bytes()
    for role in ENDPOINTS:
        for key in GLOBAL_KEYS:
            if int(tb.host_sysctl(role, key)) < buf:
                tb.host_sysctl(role, key, str(buf))
        available = tb.host_sysctl(role, "net.ipv4.tcp_available_congestion_control").split()
        if cc not in available:
            raise QuicbedError(
                f"congestion control {cc!r} is not available in the kernel of {tb.name(role)} "
                f"(available: {', '.join(available)})"
            )
        # A namespace may only pick a CC that the (global) allowed list names.
        key = "net.ipv4.tcp_allowed_congestion_control"
        allowed = tb.host_sysctl(role, key).split()
        if cc not in allowed:
            tb.host_sysctl(role, key, " ".join([*allowed, cc]))
    for role in ENDPOINTS:
        tb.sysctl(role, "net.ipv4.tcp_rmem", f"4096 131072 {buf}")
        tb.sysctl(role, "net.ipv4.tcp_wmem", f"4096 16384 {buf}")
        tb.sysctl(role, "net.ipv4.tcp_congestion_control", cc)
    return read_tuning(tb, offloads)


def read_tuning(tb: Testbed, offloads: Mapping[str, str] | None = None) -> dict[str, object]:
    """The sysctls that matter, as the kernel reports them now (for receipts and provenance),
    and the NIC offloads of every veth end (``ethtool -k``, all off or this raises): the
    offloads decide whether the link sees real packets, so a package must show them. A
    cell's ``offloads`` (quicbed.roles.offloads) are what they must read back as instead,
    recorded beside them as ``offloads_set``."""
    out: dict[str, object] = {k: tb.host_sysctl("server", k) for k in GLOBAL_RECORDED}
    for role in ENDPOINTS:
        keys = {k: tb.read_sysctl(role, k) for k in HOST_KEYS}
        if not tb.shared_host_sysctls:  # another host: its global keys are its own
            keys.update({k: tb.host_sysctl(role, k) for k in GLOBAL_RECORDED})
        out[role] = keys
    out["offloads"] = tb.check_offloads(offloads)
    if offloads:
        out["offloads_set"] = dict(offloads)
    return out
