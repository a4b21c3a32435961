"""``userspace``: quicbed-linkem, our Go emulator in the bridge namespace (AF_PACKET).

It runs on any Linux kernel, including ones without sch_netem (this CI machine), and
is the only shaper with its own clock per frame: its counters carry each frame's
lateness, which proves every load (quicbed.link.loadproof).
"""

from __future__ import annotations

import json
import time
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.model import capacity, mahimahi
from quicbed.model.link import LinkCondition
from quicbed.roles.cpuaccounting import EMULATOR
from quicbed.roles.interface import Roles, RPath
from quicbed.shapers.shaper import INGRESS, Shaper

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
    summary = "quicbed-linkem, our emulator in the bridge namespace (any Linux kernel)"
    auto_rank = 2
    kernel_state = False
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
    def config(cond: LinkCondition, trace_dir: RPath | None = None) -> dict[str, Any]:
        """The emulator's config file (format 1), the contract with go/cmd/quicbed-linkem.
        A trace's files are named in ``trace_dir`` on the bridge (None: by name alone,
        as provenance states them)."""
        dirs = {}
        for name, p in cond.pipes().items():
            extra: dict[str, Any] = {}
            if p.capacity and p.capacity["kind"] == "trace":
                trace = capacity.load(p.capacity["trace"])
                if trace.sha256 != p.capacity["sha256"]:
                    raise QuicbedError(
                        f"trace {trace.name!r}: the store's has digest {trace.sha256[:12]}, "
                        f"the cell's {p.capacity['sha256'][:12]} (the trace changed since "
                        "the cell was planned)"
                    )
                file = f"{name}.trace" if trace_dir is None else str(trace_dir / f"{name}.trace")
                extra["capacity"] = {
                    "kind": "trace",
                    "file": file,
                    "sha256": trace.file_sha256(name),
                    **({"start_us": p.capacity["start_us"]} if "start_us" in p.capacity else {}),
                }
            elif p.capacity:
                extra["capacity"] = p.capacity
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
                **({"address_delay_us": p.address_delay_us} if p.address_delay_us else {}),
                **extra,
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
        if cond.trace is not None:
            trace = capacity.load(cond.trace)
            for d in capacity.DIRECTIONS:
                tb.write_text(
                    "bridge", f["dir"] / f"{d}.trace", mahimahi.trace_text(trace.offsets(d))
                )
        config = self.config(cond, f["dir"])
        tb.write_text("bridge", f["config"], json.dumps(config, indent=2))
        with tb.cpu.joining("bridge", EMULATOR):  # its CPU per load (quicbed.roles.cpuaccounting)
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

    def counters(self, tb: Roles, signal: str = "USR1") -> dict[str, Any] | None:
        pid = self.pid(tb)
        if pid is None:
            return None
        f = self._files(tb)["stats"]
        before = tb.read_text("bridge", f)  # carries the uptime: every write differs
        tb.kill("bridge", pid, signal)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            text = tb.read_text("bridge", f)
            if text and text != before:
                counters: dict[str, Any] = json.loads(text)
                return counters
            time.sleep(0.01)
        raise QuicbedError(f"{self.binary} (pid {pid}) did not write its counters")

    def restart(self, tb: Roles) -> dict[str, Any] | None:
        """Start a time-varying link's trace or schedule again from its start (both
        directions at one instant) and return the counters the emulator wrote just
        after; a constant link's counters as they are."""
        return self.counters(tb, "USR2")

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
