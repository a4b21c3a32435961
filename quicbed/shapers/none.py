"""``none``: no shaping at all, server and client joined by the kernel's bridge alone, for
links as fast as the hosts (the endpoints, not an emulator, are the bottleneck)."""

from __future__ import annotations

from typing import Any

from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.roles.interface import Roles
from quicbed.shapers.bridge import BRIDGE_DEV, PORTS, bridge_state, bridge_up
from quicbed.shapers.shaper import Shaper
from quicbed.shapers.userspace import UserspaceShaper

#: the qdiscs a port may have and still shape nothing: a veth's and a bridge's default
UNSHAPED_QDISCS = ("noqueue",)


class NoShaper(Shaper):
    """No shaping: the bridge namespace's kernel bridge joins server and client, and
    nothing else is on the path (no emulator, no qdisc but the devices' own). For
    links as fast as the hosts: a stack's own limit, not an emulator's (quicbed-linkem
    tops out near 1 Gbit/s on 2 cores), is then what a transfer meets.

    It takes only a condition that shapes nothing (rate unlimited, no delay, loss or
    jitter), and its receipt judges only that nothing shapes; the RTT and the TCP and
    UDP rates it reports are what this path carries. On an ssh testbed it needs a
    Linux bridge node (a Dummynet bridge passes every packet through its pipes).
    """

    name = "none"
    summary = "the kernel bridge alone: rate unlimited, no delay, loss or jitter"
    shapes = False

    def unavailable(self, tb: Roles) -> str | None:
        cp = tb.on_bridge_host(["sh", "-c", "command -v ip"])
        if cp.returncode != 0:
            return (
                f"the bridge {tb.name('bridge')} has no Linux kernel bridge (no `ip`): a "
                "Dummynet bridge passes every packet through its pipes, so nothing there "
                "is unshaped"
            )
        return None

    def check(self, cond: LinkCondition) -> None:
        shaped = []
        if cond.rate_mbit is not None:
            shaped.append(f"rate {cond.rate_mbit:g} Mbit/s")
        for name, v in (
            ("rtt", cond.rtt_ms),
            ("delay down", cond.delay_down_ms),
            ("delay up", cond.delay_up_ms),
        ):
            if v:
                shaped.append(f"{name} {v:g} ms")
        for name, v in (
            ("loss", cond.loss_pct),
            ("loss down", cond.loss_down_pct),
            ("loss up", cond.loss_up_pct),
        ):
            if v:
                shaped.append(f"{name} {v:g} %")
        if cond.jitter_ms:
            shaped.append(f"jitter {cond.jitter_ms:g} ms")
        if cond.varying():
            shaped.append(f"{cond.varying()} {cond.trace or cond.schedule}")
        if cond.origin_rtt:
            shaped.append(f"origin_rtt {cond.origin_rtt}")
        if shaped:
            raise QuicbedError(
                f"shaper none shapes nothing, so it takes rate unlimited and no delay, loss "
                f"or jitter (got {', '.join(shaped)}); use another shaper for those"
            )

    def apply(self, tb: Roles, cond: LinkCondition, *, persistent: bool = False) -> None:
        self.check(cond)
        reason = self.unavailable(tb)
        if reason:
            raise QuicbedError(f"shaper none: {reason}")
        self.clear(tb)
        try:
            bridge_up(tb)
        except BaseException:
            self.clear(tb)
            raise

    def state(self, tb: Roles) -> str:
        return bridge_state(tb)

    def shaping(self, tb: Roles) -> list[str]:
        found = []
        pid = UserspaceShaper().pid(tb)
        if pid is not None:
            found.append(f"the link emulator runs (pid {pid})")
        for dev in (*PORTS, BRIDGE_DEV):
            out = tb.exec("bridge", ["tc", "qdisc", "show", "dev", dev], check=False).stdout
            for line in out.splitlines():
                kind = line.split()[1] if len(line.split()) > 1 else ""
                if kind not in UNSHAPED_QDISCS:
                    found.append(f"{dev} has qdisc {line.strip()!r}")
        cp = tb.exec("bridge", ["ip", "-o", "link", "show", "master", BRIDGE_DEV], check=False)
        ports = {
            ln.split(":")[1].strip().split("@")[0] for ln in cp.stdout.splitlines() if ":" in ln
        }
        if ports != set(PORTS):
            found.append(
                f"the bridge {BRIDGE_DEV} joins {sorted(ports) or 'nothing'}, not srv and cli"
            )
        return found

    def clear(self, tb: Roles) -> dict[str, Any] | None:
        tb.exec("bridge", ["ip", "link", "del", BRIDGE_DEV], check=False)
        return None

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {"shaper": self.name, "path": f"kernel bridge {BRIDGE_DEV}, no qdisc, no emulator"}
