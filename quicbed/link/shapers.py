"""Shapers: three ways to apply the same per-direction pipes, behind one interface.

- ``userspace``: quicbed-linkem, our Go emulator in the bridge namespace (AF_PACKET);
  runs on any Linux kernel, including ones without sch_netem (this CI machine).
- ``netem``: a kernel bridge in the bridge namespace with tbf (queue + rate) and a
  netem child (delay, jitter, loss) on each egress port.
- ``dummynet``: ``ipfw pipe`` commands for the FreeBSD bridge of an Emulab experiment;
  generated and tested here, applied over SSH by the ssh testbed.

A shaper keeps its state in files under the testbed's state directory, not in
Python objects, so ``quicbed link clear`` in one process undoes ``apply`` in another.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.link.model import ETH_HEADER, MAX_FRAME, JitterKind, LinkCondition, Pipe
from quicbed.paths import bin_path
from quicbed.testbed.local import LocalTestbed

SHAPERS = ("auto", "userspace", "netem", "dummynet")
#: egress port in the bridge namespace for each direction
EGRESS = {"down": "cli", "up": "srv"}
INGRESS = {"down": "srv", "up": "cli"}


class Shaper(ABC):
    """Applies a LinkCondition to a testbed's bridge and reads back what it did."""

    name: str

    @abstractmethod
    def unavailable(self, tb: LocalTestbed) -> str | None:
        """Why this shaper cannot run here, or None if it can."""

    @abstractmethod
    def apply(self, tb: LocalTestbed, cond: LinkCondition, *, persistent: bool = False) -> None:
        """Shape the link; replaces whatever condition was in force."""

    @abstractmethod
    def clear(self, tb: LocalTestbed) -> dict[str, Any] | None:
        """Remove the shaping (the link stops forwarding); returns final counters if any."""

    def counters(self, tb: LocalTestbed) -> dict[str, Any] | None:
        """The emulator's own per-direction counters, if it has any."""
        return None

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        """What was applied, as data for the receipt and provenance."""
        return {"shaper": self.name}


# --- userspace ------------------------------------------------------------------------
class UserspaceShaper(Shaper):
    """quicbed-linkem in the bridge namespace, forwarding frames between srv and cli."""

    name = "userspace"
    binary = "quicbed-linkem"

    def unavailable(self, tb: LocalTestbed) -> str | None:
        try:
            bin_path(self.binary)
        except QuicbedError as exc:
            return str(exc)
        return None

    def _files(self, tb: LocalTestbed) -> dict[str, Path]:
        d = tb.state_dir / "linkem"
        return {
            "dir": d,
            "config": d / "config.json",
            "stats": d / "stats.json",
            "ready": d / "ready",
            "log": d / "linkem.log",
            "pid": d / "linkem.pid",
        }

    @staticmethod
    def config(cond: LinkCondition) -> dict[str, Any]:
        """The emulator's config file (format 1), the contract with go/cmd/quicbed-linkem."""
        dirs = {}
        for name, p in cond.pipes().items():
            dirs[name] = {
                "rate_bps": p.rate_bps or 0,
                "delay_us": p.delay_us,
                "jitter_us": p.jitter_us,
                "jitter_kind": p.jitter_kind.value,
                "jitter_interval_us": p.jitter_interval_us,
                "loss": p.loss,
                "queue_bytes": p.queue_bytes or 0,
                "queue_packets": p.queue_packets or 0,
                "count": p.count,
            }
        return {
            "format": 1,
            "server_if": INGRESS["down"],
            "client_if": INGRESS["up"],
            "seed": cond.seed,
            "directions": dirs,
        }

    def apply(self, tb: LocalTestbed, cond: LinkCondition, *, persistent: bool = False) -> None:
        exe = bin_path(self.binary)
        self.clear(tb)
        f = self._files(tb)
        f["dir"].mkdir(parents=True, exist_ok=True)
        for k in ("stats", "ready"):
            f[k].unlink(missing_ok=True)
        f["config"].write_text(json.dumps(self.config(cond), indent=2))
        p = tb.spawn(
            "bridge",
            [str(exe), "--config", str(f["config"]), "--stats", str(f["stats"]),
             "--ready-file", str(f["ready"])],
            log=f["log"],
            die_with_parent=not persistent,
        )  # fmt: skip
        f["pid"].write_text(str(p.pid))
        deadline = time.monotonic() + 10
        while not f["ready"].exists():
            if p.poll() is not None or time.monotonic() > deadline:
                tail = f["log"].read_text(errors="replace").strip().splitlines()[-3:]
                proc.stop_pid(p.pid)
                f["pid"].unlink(missing_ok=True)
                raise QuicbedError(
                    f"{self.binary} did not start (exit {p.poll()}): {' | '.join(tail)}"
                )
            time.sleep(0.02)

    def pid(self, tb: LocalTestbed) -> int | None:
        f = self._files(tb)["pid"]
        try:
            pid = int(f.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if proc.pid_alive(pid) else None

    def counters(self, tb: LocalTestbed) -> dict[str, Any] | None:
        pid = self.pid(tb)
        if pid is None:
            return None
        f = self._files(tb)["stats"]
        before = f.stat().st_mtime_ns if f.exists() else 0
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if f.exists() and f.stat().st_mtime_ns != before:
                return json.loads(f.read_text())
            time.sleep(0.01)
        raise QuicbedError(f"{self.binary} (pid {pid}) did not write its counters")

    def clear(self, tb: LocalTestbed) -> dict[str, Any] | None:
        f = self._files(tb)
        pid = self.pid(tb)
        if pid is None:
            f["pid"].unlink(missing_ok=True)
            return None
        before = f["stats"].stat().st_mtime_ns if f["stats"].exists() else 0
        proc.stop_pid(pid, timeout=5)
        f["pid"].unlink(missing_ok=True)
        if f["stats"].exists() and f["stats"].stat().st_mtime_ns != before:
            return json.loads(f["stats"].read_text())
        return None

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {"shaper": self.name, "emulator": self.binary, "config": self.config(cond)}


# --- netem ----------------------------------------------------------------------------
class NetemShaper(Shaper):
    """Kernel bridge + tbf (FIFO queue, rate) + netem child (delay, jitter, loss).

    Order differs from Dummynet in one respect: netem drops at the exit of the delay
    line, not at the entry of the queue, so a lost packet briefly occupies the queue.
    netem has no seed option in Debian 12's iproute2: its loss pattern is not
    reproducible, which the receipt records.
    """

    name = "netem"

    def unavailable(self, tb: LocalTestbed) -> str | None:
        ns = f"{tb.prefix}-probe"
        proc.run(["ip", "netns", "del", ns], check=False)
        try:
            proc.run(["ip", "netns", "add", ns])
            cp = proc.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root",
                 "netem", "delay", "1ms"],
                check=False,
            )  # fmt: skip
        finally:
            proc.run(["ip", "netns", "del", ns], check=False)
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

    def apply(self, tb: LocalTestbed, cond: LinkCondition, *, persistent: bool = False) -> None:
        reason = self.unavailable(tb)
        if reason:
            raise QuicbedError(f"shaper netem: {reason}")
        cmds = self.commands(cond)
        self.clear(tb)
        try:
            tb.exec("bridge", ["ip", "link", "add", "br0", "type", "bridge"])
            for dev in ("srv", "cli"):
                tb.exec("bridge", ["ip", "link", "set", dev, "master", "br0"])
            tb.exec("bridge", ["ip", "link", "set", "br0", "up"])
            for c in cmds:
                tb.exec("bridge", c)
        except BaseException:
            self.clear(tb)
            raise

    def clear(self, tb: LocalTestbed) -> dict[str, Any] | None:
        for dev in ("srv", "cli"):
            tb.exec("bridge", ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        tb.exec("bridge", ["ip", "link", "del", "br0"], check=False)
        return None

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {
            "shaper": self.name,
            "commands": [" ".join(c) for c in self.commands(cond)],
            "seeded": False,
        }


# --- dummynet -------------------------------------------------------------------------
class DummynetShaper(Shaper):
    """FreeBSD ``ipfw pipe`` lines for the Emulab bridge node (applied by the ssh testbed).

    Dummynet has no jitter and no seed; its delay has 1 ms granularity (kern.hz=1000)
    and its queue is given in slots or KBytes. Jitter on the testbed is applied with
    netem on the client, as the reference study did.
    """

    name = "dummynet"

    def unavailable(self, tb: LocalTestbed) -> str | None:
        return (
            "shaper dummynet runs on a FreeBSD bridge node of an Emulab/CloudLab "
            "experiment (ssh testbed), not on the local testbed; use --shaper userspace"
        )

    @staticmethod
    def commands(cond: LinkCondition, pipe_numbers: dict[str, int]) -> list[str]:
        """``ipfw pipe N config ...`` lines, one per direction, for the given pipe numbers."""
        missing = {"down", "up"} - set(pipe_numbers)
        if missing:
            raise QuicbedError(f"dummynet: no pipe number for direction(s) {sorted(missing)}")
        lines = []
        for direction, p in cond.pipes().items():
            if p.jitter_us:
                raise QuicbedError(
                    f"dummynet has no jitter (asked {p.jitter_us / 1000:g} ms); the ssh testbed "
                    "applies jitter with netem on the client"
                )
            if p.delay_us % 1000:
                raise QuicbedError(
                    f"dummynet delay has 1 ms granularity ({direction} delay "
                    f"{p.delay_us / 1000:g} ms)"
                )
            bw = "0" if not p.rate_bps else _ipfw_bw(p.rate_bps)
            parts = [f"ipfw pipe {pipe_numbers[direction]} config bw {bw}",
                     f"delay {p.delay_us // 1000}"]  # fmt: skip
            if p.loss:
                parts.append(f"plr {p.loss:.6g}")
            if p.queue_packets:
                parts.append(f"queue {p.queue_packets}")
            elif p.queue_bytes:
                parts.append(f"queue {math.ceil(p.queue_bytes / 1024)}Kbytes")
            lines.append(" ".join(parts))
        return lines

    def apply(self, tb: LocalTestbed, cond: LinkCondition, *, persistent: bool = False) -> None:
        raise QuicbedError(str(self.unavailable(tb)))

    def clear(self, tb: LocalTestbed) -> dict[str, Any] | None:
        return None


def _ipfw_bw(bps: int) -> str:
    for unit, scale in (("Mbit/s", 1_000_000), ("Kbit/s", 1000)):
        if bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit/s"


def get_shaper(name: str, tb: LocalTestbed) -> Shaper:
    """Resolve ``--shaper``: ``auto`` takes netem where the kernel has it, else userspace.

    An explicit shaper that cannot run here is an error naming it and why.
    """
    shapers: dict[str, type[Shaper]] = {
        "userspace": UserspaceShaper,
        "netem": NetemShaper,
        "dummynet": DummynetShaper,
    }
    if name == "auto":
        netem = NetemShaper()
        if netem.unavailable(tb) is None:
            return netem
        name = "userspace"
    if name not in shapers:
        raise QuicbedError(f"unknown shaper {name!r} (one of {', '.join(SHAPERS)})")
    shaper = shapers[name]()
    reason = shaper.unavailable(tb)
    if reason:
        raise QuicbedError(f"shaper {name!r} cannot run here: {reason}")
    return shaper
