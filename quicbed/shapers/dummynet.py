"""``dummynet``: ``ipfw pipe`` commands for the FreeBSD bridge of an Emulab experiment,
generated and tested here, applied over SSH by the ssh testbed."""

from __future__ import annotations

import json
import math
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.model.link import JitterKind, LinkCondition, Pipe
from quicbed.roles.interface import Roles, RPath
from quicbed.shapers.shaper import Shaper, constant_capacity, no_ecn_marking, one_distance

#: written on the bridge by the bridge_dummynet role: which Emulab pipe shapes which way
PIPES_FILE = RPath("/var/db/quicbed/pipes.json")
#: the endpoint whose egress carries each direction's jitter. The long-look study
#: (section 3, Table 3.1: "Dummynet and TC Netem") shaped with Dummynet and added jitter
#: with TC on its client node, Dummynet's delay not being updatable fast enough; here
#: each direction's netem sits on its sender's egress (down: server, up: client)
JITTER_ROLE = {"down": "server", "up": "client"}


class DummynetShaper(Shaper):
    """``ipfw pipe`` on the FreeBSD bridge node of an Emulab/CloudLab experiment.

    The pipes are Emulab's own (found at provisioning, ``PIPES_FILE``); quicbed only
    reconfigures them. Dummynet has no jitter and no seed, and its delay is set in
    whole milliseconds; its queue is given in slots or KBytes. Jitter is applied with
    netem on the sending endpoint's experiment interface (server for the down
    direction, client for up), as the reference study did on its client: Dummynet
    delays by D - J and netem by J +/- J, so the sum is D +/- J, and packets overtake
    (jitter kind ``reorder``; ``smooth`` cannot be done this way).
    """

    name = "dummynet"
    summary = "ipfw pipes on an Emulab/CloudLab FreeBSD bridge node (ssh testbed)"
    auto_rank = 0

    def unavailable(self, tb: Roles) -> str | None:
        if tb.makes_namespaces:  # its bridge is a namespace here, not an Emulab node
            return (
                "shaper dummynet runs on a FreeBSD bridge node of an Emulab/CloudLab "
                "experiment (ssh testbed), not on the local testbed; use --shaper "
                "userspace"
            )
        if tb.exec("bridge", ["sh", "-c", "command -v ipfw"], check=False).returncode != 0:
            return f"the bridge {tb.name('bridge')} has no ipfw (it is not a Dummynet bridge)"
        if not tb.has_file("bridge", PIPES_FILE):
            return (
                f"the bridge {tb.name('bridge')} has no {PIPES_FILE}: provision it with "
                "playbooks/site.yml (role bridge_dummynet finds Emulab's pipes)"
            )
        return None

    @staticmethod
    def pipe_numbers(tb: Roles) -> dict[str, int]:
        text = tb.read_text("bridge", PIPES_FILE)
        try:
            data = json.loads(text)
            if data.get("format") != 1:
                raise ValueError(f"format {data.get('format')!r}, this quicbed reads 1")
            pipes = {d: int(data["pipes"][d]) for d in ("down", "up")}
        except (ValueError, KeyError, TypeError) as exc:
            raise QuicbedError(
                f"{PIPES_FILE} on {tb.name('bridge')} is not usable: {exc}"
            ) from None
        return pipes

    @staticmethod
    def split_jitter(p: Pipe) -> tuple[int, int]:
        """(Dummynet delay, netem delay) in microseconds for a pipe with jitter."""
        bridge = max(0, p.delay_us - p.jitter_us)
        return bridge, p.delay_us - bridge

    @staticmethod
    def commands(cond: LinkCondition, pipe_numbers: dict[str, int]) -> list[str]:
        """``ipfw pipe N config ...`` lines, one per direction, for the given pipe numbers."""
        missing = {"down", "up"} - set(pipe_numbers)
        if missing:
            raise QuicbedError(f"dummynet: no pipe number for direction(s) {sorted(missing)}")
        lines = []
        for direction, p in cond.pipes().items():
            if p.jitter_us and p.jitter_kind == JitterKind.smooth:
                raise QuicbedError(
                    "shaper dummynet cannot keep packet order under jitter (jitter kind "
                    "'smooth'): its jitter is netem's on the endpoints; use 'reorder'"
                )
            if p.jitter_us and p.jitter_kind == JitterKind.step:
                raise QuicbedError(
                    "shaper dummynet does not apply jitter kind 'step' (it needs a process "
                    "re-drawing the endpoints' netem delay, which quicbed does not run on an "
                    "ssh testbed yet); use 'reorder', or the local testbed's userspace shaper"
                )
            delay_us = DummynetShaper.split_jitter(p)[0] if p.jitter_us else p.delay_us
            if delay_us % 1000 or p.jitter_us % 1000:
                raise QuicbedError(
                    f"dummynet delay has 1 ms granularity ({direction} delay "
                    f"{p.delay_us / 1000:g} ms, jitter {p.jitter_us / 1000:g} ms)"
                )
            bw = "0" if not p.rate_bps else _ipfw_bw(p.rate_bps)
            parts = [
                f"ipfw pipe {pipe_numbers[direction]} config bw {bw}",
                f"delay {delay_us // 1000}",
            ]
            if p.loss:
                parts.append(f"plr {p.loss:.6g}")
            if p.queue_packets:
                parts.append(f"queue {p.queue_packets}")
            elif p.queue_bytes:
                parts.append(f"queue {math.ceil(p.queue_bytes / 1024)}Kbytes")
            lines.append(" ".join(parts))
        return lines

    @staticmethod
    def jitter_commands(cond: LinkCondition, devices: dict[str, str]) -> dict[str, list[str]]:
        """``tc`` netem per endpoint role (its experiment interface ``devices[role]``)."""
        out = {}
        for direction, p in cond.pipes().items():
            if not p.jitter_us:
                continue
            role = JITTER_ROLE[direction]
            netem_us = DummynetShaper.split_jitter(p)[1]
            out[role] = [
                "tc",
                "qdisc",
                "replace",
                "dev",
                devices[role],
                "root",
                "netem",
                "limit",
                "100000",
                "delay",
                f"{netem_us}us",
                f"{p.jitter_us}us",
            ]
        return out

    def _devices(self, tb: Roles) -> dict[str, str]:
        find = getattr(tb, "experiment_interface", None)
        if find is None:
            raise QuicbedError(f"shaper dummynet needs an ssh testbed (this one is {tb.kind})")
        return {"server": find("server", tb.server_ip), "client": find("client", tb.client_ip)}

    def apply(self, tb: Roles, cond: LinkCondition, *, persistent: bool = False) -> None:
        reason = self.unavailable(tb)
        if reason:
            raise QuicbedError(f"shaper dummynet: {reason}")
        lines = self.commands(cond, self.pipe_numbers(tb))
        jitter = self.jitter_commands(cond, self._devices(tb)) if cond.jitter_ms else {}
        self.clear(tb)
        try:  # all or nothing: a failure leaves the pipes as clear() made them
            for line in lines:
                tb.exec("bridge", line.split())
            for role, argv in jitter.items():
                tb.exec(role, argv)
        except BaseException:
            self.clear(tb)
            raise

    def state(self, tb: Roles) -> str:
        """Each pipe's configuration line (``NNNNN: bw delay ...``; ipfw prints counters
        on the lines below it) and the endpoints' netem qdiscs."""
        if self.unavailable(tb) is not None:
            return "no dummynet"
        parts = []
        for d, n in sorted(self.pipe_numbers(tb).items()):
            shown = tb.exec("bridge", ["ipfw", "pipe", str(n), "show"], check=False).stdout
            parts.append(f"{d}: {(shown.strip().splitlines() or [''])[0]}")
        for role, dev in sorted(self._devices(tb).items()):
            qd = tb.exec(role, ["tc", "qdisc", "show", "dev", dev], check=False).stdout.strip()
            parts.append(f"{role}: {qd}")
        return "\n".join(parts)

    def clear(self, tb: Roles) -> dict[str, Any] | None:
        """Pipes back to no shaping (Emulab's own values are not restored), no netem."""
        if self.unavailable(tb) is not None:
            return None
        for n in self.pipe_numbers(tb).values():
            tb.exec(
                "bridge", ["ipfw", "pipe", str(n), "config", "bw", "0", "delay", "0"], check=False
            )
        for role, dev in self._devices(tb).items():
            qd = tb.exec(role, ["tc", "qdisc", "show", "dev", dev], check=False).stdout
            if " netem " in f" {qd} ":
                tb.exec(role, ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        return None

    def check(self, cond: LinkCondition) -> None:
        no_ecn_marking(self.name, cond)
        constant_capacity(self.name, cond)
        one_distance(self.name, cond)
        self.commands(cond, {"down": 0, "up": 0})  # the ipfw commands refuse what they can't

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {"shaper": self.name, "seeded": False, "pipes_file": str(PIPES_FILE)}


def _ipfw_bw(bps: int) -> str:
    for unit, scale in (("Mbit/s", 1_000_000), ("Kbit/s", 1000)):
        if bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit/s"
