"""The bridge namespace's kernel bridge, which the kernel's shapers on a Linux bridge
(netem, none) put between its two ports."""

from __future__ import annotations

from quicbed.roles.interface import Roles

BRIDGE_DEV = "br0"
PORTS = ("srv", "cli")


def bridge_up(tb: Roles) -> None:
    """A kernel bridge between the bridge namespace's two ports."""
    tb.exec("bridge", ["ip", "link", "add", BRIDGE_DEV, "type", "bridge"])
    for dev in PORTS:
        tb.exec("bridge", ["ip", "link", "set", dev, "master", BRIDGE_DEV])
    tb.exec("bridge", ["ip", "link", "set", BRIDGE_DEV, "up"])


def bridge_state(tb: Roles) -> str:
    """The bridge's ifindex and each port's qdiscs as tc reports them (no counters)."""
    shown = tb.exec("bridge", ["ip", "-o", "link", "show", BRIDGE_DEV], check=False).stdout
    parts = [shown.partition(":")[0]]
    for dev in PORTS:
        qd = tb.exec("bridge", ["tc", "qdisc", "show", "dev", dev], check=False).stdout
        parts.append(qd.strip())
    return "\n".join(parts)
