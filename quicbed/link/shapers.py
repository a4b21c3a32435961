"""Shapers: three ways to apply the same per-direction pipes, behind one interface.

- ``userspace``: quicbed-linkem, our Go emulator in the bridge namespace (AF_PACKET);
  runs on any Linux kernel, including ones without sch_netem (this CI machine).
- ``netem``: a kernel bridge in the bridge namespace with tbf (queue + rate) and a
  netem child (delay, jitter, loss) on each egress port.
- ``dummynet``: ``ipfw pipe`` commands for the FreeBSD bridge of an Emulab experiment;
  generated and tested here, applied over SSH by the ssh testbed;
- ``none``: no shaping at all, server and client joined by the kernel's bridge alone,
  for links as fast as the hosts (the endpoints, not an emulator, are the bottleneck).

A shaper keeps its state in files under the testbed's state directory, not in
Python objects, so ``clear`` in one process (``quicbed testbed down``, or the next
``quicbed link check``) undoes ``apply`` in another.

A shaper needs a testbed's roles only (quicbed.testbed.roles), not its life: the
testbed's teardown (quicbed.testbed.base) is what calls ``clear_all``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from abc import ABC, abstractmethod
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.link.model import ETH_HEADER, MAX_FRAME, JitterKind, LinkCondition, Pipe
from quicbed.testbed.cpu import EMULATOR
from quicbed.testbed.roles import Roles, RPath

SHAPERS = ("auto", "userspace", "netem", "dummynet", "none")
#: egress port in the bridge namespace for each direction
EGRESS = {"down": "cli", "up": "srv"}
INGRESS = {"down": "srv", "up": "cli"}


class Shaper(ABC):
    """Applies a LinkCondition to a testbed's bridge and reads back what it did."""

    name: str

    @abstractmethod
    def unavailable(self, tb: Roles) -> str | None:
        """Why this shaper cannot run here, or None if it can."""

    @abstractmethod
    def apply(self, tb: Roles, cond: LinkCondition, *, persistent: bool = False) -> None:
        """Shape the link; replaces whatever condition was in force."""

    @abstractmethod
    def clear(self, tb: Roles) -> dict[str, Any] | None:
        """Remove the shaping (the link stops forwarding); returns final counters if any."""

    def counters(self, tb: Roles) -> dict[str, Any] | None:
        """The emulator's own per-direction counters, if it has any."""
        return None

    def cpu_seconds(self, tb: Roles) -> float | None:
        """CPU time the emulator has used so far, if it is a process of ours."""
        return None

    #: random loss is drawn at the queue's entry (Dummynet's order), not after the rate
    loss_before_queue: bool = True
    #: False: the shaper applies no condition, so a receipt judges only that nothing
    #: shapes (:meth:`shaping`), and reports what the link carried (``none``)
    shapes: bool = True

    def shaping(self, tb: Roles) -> list[str]:
        """What shapes the link now, read back from the bridge (a shaper that does not
        shape must find nothing: the receipt's check ``unshaped``)."""
        return []

    @abstractmethod
    def check(self, cond: LinkCondition) -> None:
        """Refuse a condition this shaper cannot apply (QuicbedError naming the option),
        before anything is made: a cell or sweep is validated whole before it starts."""

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        """What was applied, as data for the receipt and provenance."""
        return {"shaper": self.name}

    @abstractmethod
    def state(self, tb: Roles) -> str:
        """The shaping in force now, as read back from the bridge (not from memory).

        Its digest is the link's *generation*: a receipt records it, every load is
        checked against it, so a link replaced or reconfigured behind a running cell
        (by another process, a crash and restart, anything) is caught.
        """

    def generation(self, tb: Roles) -> str:
        return hashlib.sha256(self.state(tb).encode()).hexdigest()[:16]


def no_ecn_marking(shaper: str, cond: LinkCondition) -> None:
    """Refuse ECN marking by name on a shaper that only drops: tbf and netem's queue mark
    nothing, and quicbed does not configure Dummynet's RED/ECN (a different AQM)."""
    if cond.ecn_threshold is not None:
        raise QuicbedError(
            f"ecn_threshold {cond.ecn_threshold!r}: the {shaper} shaper does not mark ECN "
            "(only the userspace emulator does: --shaper userspace)"
        )


# --- userspace ------------------------------------------------------------------------
#: how the userspace emulator is scheduled: ``rt`` (SCHED_FIFO at RT_PRIORITY, every
#: thread) or ``normal`` (the kernel's default policy). Measured here, both in one run
#: (docs/benchmarks/noisy-host.md): at rt a load's latest frame is usually far more
#: punctual (5 KB at 36 ms: 0.1 against 0.9 ms in the median load), but the page loads
#: themselves got slower (+2.0 and +2.5 ms on 5 KB, +6.1 ms on 1 MB over h2; Welch p
#: 0.02, 0.02, 5e-6) and no quieter (PLT sd 2.7 against 2.6 ms on 5 KB h2, 4.3 against
#: 2.2 on 1 MB h2): the emulator preempts the browser and servers it shares 2 cores with.
#: So normal is the default, rt a measured option.
EMULATOR_PRIORITIES = ("rt", "normal")
DEFAULT_EMULATOR_PRIORITY = "normal"
#: SCHED_FIFO's priority for the emulator: above every normal thread, below the
#: kernel's own real-time threads (watchdogs, migration: 99)
RT_PRIORITY = 20


def check_emulator_priority(value: str, what: str = "--emulator-priority") -> str:
    if value not in EMULATOR_PRIORITIES:
        raise QuicbedError(
            f"{what} {value!r}: how the link emulator is scheduled, one of "
            f"{', '.join(EMULATOR_PRIORITIES)}"
        )
    return value


class UserspaceShaper(Shaper):
    """quicbed-linkem in the bridge namespace, forwarding frames between srv and cli,
    scheduled as ``priority`` says (EMULATOR_PRIORITIES)."""

    name = "userspace"
    binary = "quicbed-linkem"

    def __init__(self, priority: str = DEFAULT_EMULATOR_PRIORITY) -> None:
        self.priority = check_emulator_priority(priority)

    def unavailable(self, tb: Roles) -> str | None:
        try:
            tb.bin_path("bridge", self.binary)
        except QuicbedError as exc:
            return str(exc)
        return None

    def _files(self, tb: Roles) -> dict[str, RPath]:
        d = tb.workdir("bridge") / "linkem"
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
                **({"ecn_threshold_bytes": p.ecn_threshold_bytes} if p.ecn_threshold_bytes else {}),
            }
        return {
            "format": 1,
            "server_if": INGRESS["down"],
            "client_if": INGRESS["up"],
            "seed": cond.seed,
            "directions": dirs,
        }

    def apply(self, tb: Roles, cond: LinkCondition, *, persistent: bool = False) -> None:
        exe = tb.bin_path("bridge", self.binary)
        self.clear(tb)
        f = self._files(tb)
        tb.mkdir("bridge", f["dir"])
        for k in ("stats", "ready"):
            tb.remove("bridge", f[k])
        tb.write_text("bridge", f["config"], json.dumps(self.config(cond), indent=2))
        with tb.cpu.joining("bridge", EMULATOR):  # its CPU per load (quicbed.testbed.cpu)
            p = tb.spawn(
                "bridge",
                [
                    str(exe),
                    "--config",
                    str(f["config"]),
                    "--stats",
                    str(f["stats"]),
                    "--ready-file",
                    str(f["ready"]),
                ],
                log=f["log"],
                die_with_parent=not persistent,
            )
        tb.write_text("bridge", f["pid"], str(p.pid))
        deadline = time.monotonic() + 10
        while not tb.has_file("bridge", f["ready"]):
            if p.poll() is not None or time.monotonic() > deadline:
                tail = tb.read_text("bridge", f["log"]).strip().splitlines()[-3:]
                p.stop()
                tb.remove("bridge", f["pid"])
                raise QuicbedError(
                    f"{self.binary} did not start (exit {p.poll()}): {' | '.join(tail)}"
                )
            time.sleep(0.02)
        if self.priority == "rt":
            # every thread: its forwarding threads exist once it is ready, and the
            # threads its runtime makes later inherit the policy
            cp = tb.exec(
                "bridge",
                ["chrt", "--fifo", "--all-tasks", "--pid", str(RT_PRIORITY), str(p.pid)],
                check=False,
            )
            if cp.returncode != 0:
                p.stop()
                tb.remove("bridge", f["pid"])
                raise QuicbedError(
                    f"--emulator-priority rt: the bridge's kernel refused SCHED_FIFO for "
                    f"{self.binary} ({(cp.stderr or cp.stdout).strip()}); use "
                    "--emulator-priority normal"
                )

    def pid(self, tb: Roles) -> int | None:
        try:
            pid = int(tb.read_text("bridge", self._files(tb)["pid"]))
        except ValueError:
            return None
        return pid if tb.alive("bridge", pid) else None

    def cpu_seconds(self, tb: Roles) -> float | None:
        pid = self.pid(tb)
        return None if pid is None else tb.cpu_seconds("bridge", pid)

    def counters(self, tb: Roles) -> dict[str, Any] | None:
        pid = self.pid(tb)
        if pid is None:
            return None
        f = self._files(tb)["stats"]
        before = tb.read_text("bridge", f)  # carries the uptime: every write differs
        tb.kill("bridge", pid, "USR1")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            text = tb.read_text("bridge", f)
            if text and text != before:
                counters: dict[str, Any] = json.loads(text)
                return counters
            time.sleep(0.01)
        raise QuicbedError(f"{self.binary} (pid {pid}) did not write its counters")

    def state(self, tb: Roles) -> str:
        """The emulator process (PID and start time: a restart is a new link) and the
        config file it was started with."""
        pid = self.pid(tb)
        if pid is None:
            return "no emulator running"
        stat = tb.read_text("bridge", RPath(f"/proc/{pid}/stat")).rpartition(")")[2].split()
        started = stat[19] if len(stat) > 19 else "?"  # field 22: starttime in ticks
        config = tb.read_text("bridge", self._files(tb)["config"])
        return f"{self.binary} pid {pid} started {started}\n{config}"

    def clear(self, tb: Roles) -> dict[str, Any] | None:
        f = self._files(tb)
        pid = self.pid(tb)
        if pid is None:
            tb.remove("bridge", f["pid"])
            return None
        before = tb.read_text("bridge", f["stats"])
        tb.stop_pid("bridge", pid, timeout=5)
        tb.remove("bridge", f["pid"])
        after = tb.read_text("bridge", f["stats"])
        return json.loads(after) if after and after != before else None

    def check(self, cond: LinkCondition) -> None:
        self.config(cond)

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {
            "shaper": self.name,
            "emulator": self.binary,
            "config": self.config(cond),
            "scheduling": f"SCHED_FIFO {RT_PRIORITY}" if self.priority == "rt" else "normal",
        }


# --- the bridge namespace's kernel bridge (netem, none) -------------------------------
BRIDGE_DEV = "br0"
PORTS = ("srv", "cli")


def _bridge_up(tb: Roles) -> None:
    """A kernel bridge between the bridge namespace's two ports."""
    tb.exec("bridge", ["ip", "link", "add", BRIDGE_DEV, "type", "bridge"])
    for dev in PORTS:
        tb.exec("bridge", ["ip", "link", "set", dev, "master", BRIDGE_DEV])
    tb.exec("bridge", ["ip", "link", "set", BRIDGE_DEV, "up"])


def _bridge_state(tb: Roles) -> str:
    """The bridge's ifindex and each port's qdiscs as tc reports them (no counters)."""
    shown = tb.exec("bridge", ["ip", "-o", "link", "show", BRIDGE_DEV], check=False).stdout
    parts = [shown.partition(":")[0]]
    for dev in PORTS:
        qd = tb.exec("bridge", ["tc", "qdisc", "show", "dev", dev], check=False).stdout
        parts.append(qd.strip())
    return "\n".join(parts)


# --- netem ----------------------------------------------------------------------------
class NetemShaper(Shaper):
    """Kernel bridge + tbf (FIFO queue, rate) + netem child (delay, jitter, loss).

    Order differs from Dummynet in one respect: netem drops at the exit of the delay
    line, not at the entry of the queue, so a lost packet briefly occupies the queue.
    netem has no seed option in Debian 12's iproute2: its loss pattern is not
    reproducible, which the receipt records.
    """

    name = "netem"
    loss_before_queue = False  # netem's loss is drawn after tbf's rate

    def unavailable(self, tb: Roles) -> str | None:
        return tb.netem_unavailable()

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
            _bridge_up(tb)
            for c in cmds:
                tb.exec("bridge", c)
        except BaseException:
            self.clear(tb)
            raise

    def state(self, tb: Roles) -> str:
        """The qdiscs as tc reports them (without counters) and the bridge's ifindex."""
        return _bridge_state(tb)

    def clear(self, tb: Roles) -> dict[str, Any] | None:
        for dev in ("srv", "cli"):
            tb.exec("bridge", ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        tb.exec("bridge", ["ip", "link", "del", BRIDGE_DEV], check=False)
        return None

    def check(self, cond: LinkCondition) -> None:
        no_ecn_marking(self.name, cond)
        self.commands(cond)

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {
            "shaper": self.name,
            "commands": [" ".join(c) for c in self.commands(cond)],
            "seeded": False,
        }


# --- dummynet -------------------------------------------------------------------------
#: written on the bridge by the bridge_dummynet role: which Emulab pipe shapes which way
PIPES_FILE = RPath("/var/db/quicbed/pipes.json")
#: the endpoint whose egress carries each direction's jitter (netem, as the study did)
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

    def unavailable(self, tb: Roles) -> str | None:
        if tb.kind == "local":
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
        self.commands(cond, {"down": 0, "up": 0})  # the ipfw commands refuse what they can't

    def describe(self, cond: LinkCondition) -> dict[str, Any]:
        return {"shaper": self.name, "seeded": False, "pipes_file": str(PIPES_FILE)}


# --- none -----------------------------------------------------------------------------
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
            _bridge_up(tb)
        except BaseException:
            self.clear(tb)
            raise

    def state(self, tb: Roles) -> str:
        return _bridge_state(tb)

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


def check_condition(name: str, cond: LinkCondition) -> None:
    """Refuse, naming the value, a condition the named shaper cannot apply (``auto``
    takes one that can, so it refuses none): a cell is validated whole before any
    testbed is touched."""
    if name != "auto":
        _CLASSES[name]().check(cond)


def _ipfw_bw(bps: int) -> str:
    for unit, scale in (("Mbit/s", 1_000_000), ("Kbit/s", 1000)):
        if bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit/s"


_CLASSES: dict[str, type[Shaper]] = {
    "userspace": UserspaceShaper,
    "netem": NetemShaper,
    "dummynet": DummynetShaper,
    "none": NoShaper,
}


def get_shaper(
    name: str,
    tb: Roles,
    cond: LinkCondition | None = None,
    emulator_priority: str = DEFAULT_EMULATOR_PRIORITY,
) -> Shaper:
    """Resolve ``--shaper``: ``auto`` takes Dummynet where the bridge has it (Emulab),
    else netem where the bridge's kernel has it, else our userspace emulator; given the
    condition, only one that can emulate it (the reference study's ``step`` jitter: our
    emulator alone), so a preset runs its study's settings wherever it runs.

    An explicit shaper that cannot run here is an error naming it and why.
    ``emulator_priority``: how the userspace emulator is scheduled (EMULATOR_PRIORITIES);
    the kernel's shapers have no process of ours to schedule.
    """
    check_emulator_priority(emulator_priority)
    shapers = _CLASSES
    if name == "auto":
        for cls in (DummynetShaper, NetemShaper):
            if cls().unavailable(tb) is None and _emulates(cls(), cond):
                return cls()
        name = "userspace"
    if name not in shapers:
        raise QuicbedError(f"unknown shaper {name!r} (one of {', '.join(SHAPERS)})")
    shaper = UserspaceShaper(emulator_priority) if name == "userspace" else shapers[name]()
    reason = shaper.unavailable(tb)
    if reason:
        raise QuicbedError(f"shaper {name!r} cannot run here: {reason}")
    return shaper


def _emulates(shaper: Shaper, cond: LinkCondition | None) -> bool:
    if cond is None:
        return True
    try:
        shaper.check(cond)
    except QuicbedError:
        return False
    return True


def clear_all(tb: Roles) -> None:
    """Remove whatever shaping a crashed run may have left (every testbed's teardown:
    ``quicbed testbed down``, a dead owner's leftovers)."""
    UserspaceShaper().clear(tb)
    if tb.kind != "local":  # locally the namespaces go, and their qdiscs with them
        for cls in (DummynetShaper, NetemShaper, NoShaper):
            if cls().unavailable(tb) is None:
                cls().clear(tb)
