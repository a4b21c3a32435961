"""``netem``: a kernel bridge in the bridge namespace with tbf (queue and rate) and a
netem child (delay, jitter, loss) on each egress port; where the kernel has sch_netem."""

from __future__ import annotations

import math
import os
import secrets
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.model.link import ETH_HEADER, MAX_FRAME, JitterKind, LinkCondition, Pipe
from quicbed.roles.interface import Roles
from quicbed.shapers.bridge import BRIDGE_DEV, bridge_state, bridge_up
from quicbed.shapers.shaper import EGRESS, Shaper, constant_capacity, no_ecn_marking, one_distance


class NetemShaper(Shaper):
    """Kernel bridge + tbf (FIFO queue, rate) + netem child (delay, jitter, loss).

    Order differs from Dummynet in one respect: netem drops at the exit of the delay
    line, not at the entry of the queue, so a lost packet briefly occupies the queue.
    netem has no seed option in Debian 12's iproute2: its loss pattern is not
    reproducible, which the receipt records.
    """

    name = "netem"
    summary = "a kernel bridge with tbf and netem on each port"
    auto_rank = 1
    loss_before_queue = False  # netem's loss is drawn after tbf's rate

    def unavailable(self, tb: Roles) -> str | None:
        """Why the bridge's kernel cannot run netem, or None (tried in a throwaway netns).

        The throwaway's name is unique per call: two testbeds of one prefix can share a
        kernel (two ssh labs on one machine, both ``ssh``), and a fixed name let one
        probe delete the other's namespace mid-try, which took a healthy testbed out.
        """
        ns = f"{tb.prefix}-probe-{os.getpid()}-{secrets.token_hex(3)}"
        tb.on_bridge_host(["ip", "netns", "del", ns])
        try:
            made = tb.on_bridge_host(["ip", "netns", "add", ns])
            if made.returncode != 0:
                return f"cannot make a network namespace to try netem: {made.stderr.strip()}"
            try_netem = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
            cp = tb.on_bridge_host(["ip", "netns", "exec", ns, *try_netem])
        finally:
            tb.on_bridge_host(["ip", "netns", "del", ns])
        if cp.returncode != 0:
            why = (cp.stderr.strip().splitlines() or ["tc failed"])[0]
            return f"this kernel cannot run netem ({why}); use --shaper userspace"
        return None

    @staticmethod
    def commands(cond: LinkCondition) -> list[list[str]]:
        """tc commands (without ``ip netns exec``) for both egress ports."""
        cmds: list[list[str]] = []
        for direction, p in cond.pipes().items():
            dev = EGRESS[direction]
            cmds.extend(NetemShaper._port(dev, p, cond))
        return cmds

    @staticmethod
    def _port(dev: str, p: Pipe, cond: LinkCondition) -> list[list[str]]:
        if p.jitter_kind == JitterKind.smooth:
            raise QuicbedError(
                "shaper netem cannot keep packet order under jitter (jitter kind 'smooth'); "
                "use --shaper userspace"
            )
        if p.jitter_kind == JitterKind.step and p.jitter_us:
            raise QuicbedError(
                "shaper netem has no re-drawn delay (jitter kind 'step'); use --shaper userspace"
            )
        netem = ["netem"]
        # netem's own limit counts packets in its delay line: hold the BDP plus jitter.
        in_flight = 1000
        if p.rate_bps:
            delay_s = (p.delay_us + p.jitter_us) / 1e6
            in_flight = max(1000, math.ceil(2 * p.rate_bps * delay_s / 8 / 84))
        netem += ["limit", str(in_flight)]
        netem += ["delay", f"{p.delay_us}us"]
        if p.jitter_us:
            netem += [f"{p.jitter_us}us"]
        if p.loss:
            netem += ["loss", f"{p.loss * 100:.6g}%"]
        if not p.rate_bps:
            return [["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *netem]]
        qbytes = p.queue_bytes or (p.queue_packets or 0) * MAX_FRAME
        burst = max(2 * MAX_FRAME, p.rate_bps // 8 // 1000)
        tbf = ["tbf", "rate", f"{p.rate_bps}bit", "burst", str(burst), "limit", str(qbytes)]
        if p.count == "ip":
            tbf += ["overhead", str(-ETH_HEADER)]
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *tbf],
            ["tc", "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:", *netem],
        ]

    def apply(self, tb: Roles, cond: LinkCondition, *, persistent: bool = False) -> None:
        reason = self.unavailable(tb)
        if reason:
            raise QuicbedError(f"shaper netem: {reason}")
        cmds = self.commands(cond)
        self.clear(tb)
        try:
            bridge_up(tb)
            for c in cmds:
                tb.exec("bridge", c)
        except BaseException:
            self.clear(tb)
            raise

    def state(self, tb: Roles) -> str:
        """The qdiscs as tc reports them (without counters) and the bridge's ifindex."""
        return bridge_state(tb)

    def clear(self, tb: Roles) -> dict[str, Any] | None:
        for dev in ("srv", "cli"):
            tb.exec("bridge", ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        tb.exec("bridge", ["ip", "link", "del", BRIDGE_DEV], check=False)
        return None

    def check(self, cond: LinkCondition) -> None:
        no_ecn_marking(self.name, cond)
        constant_capacity(self.name, cond)
        one_distance(self.name, cond)
        self.commands(cond)

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {
            "shaper": self.name,
            "commands": [" ".join(c) for c in self.commands(cond)],
            "seeded": False,
        }
