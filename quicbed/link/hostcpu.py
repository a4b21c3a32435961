"""What the emulator's machine did with its CPU while a link was measured.

A receipt that fails on a link that passed a minute ago is usually the machine's fault,
not the emulator's: a userspace emulator and its probes on a small virtual machine lose
time to other tenants (the hypervisor's *steal*) or to other work on the host. The
receipt keeps the shares of the host's CPU time over its own span, read from the
aggregate ``cpu`` line of ``/proc/stat`` on the bridge's machine, so a failed receipt
can say which one it was and a reader of a results folder can tell a noisy host from a
bad link.
"""

from __future__ import annotations

from typing import Any

from quicbed.testbed.lifecycle import Testbed

#: /proc/stat's cpu columns, in its order (Linux >= 2.6.33)
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

#: a steal share from which a failed receipt names the host as a likely cause
STEAL_NOTABLE_PCT = 2.0


def sample(tb: Testbed, role: str = "bridge") -> list[int] | None:
    """The host's cumulative CPU ticks by ``FIELDS``, or None where it cannot be read."""
    cp = tb.on_host(role, ["head", "-n", "1", "/proc/stat"])
    return parse(cp.stdout) if cp.returncode == 0 else None


def sample_here() -> list[int] | None:
    """``sample`` of the machine this process runs on (a benchmark with no testbed)."""
    try:
        with open("/proc/stat") as f:
            return parse(f.readline())
    except OSError:
        return None


def parse(cpu_line: str) -> list[int] | None:
    """The ticks of /proc/stat's aggregate ``cpu`` line, or None if it is not one."""
    parts = cpu_line.split()
    if not parts or parts[0] != "cpu" or len(parts) < 1 + len(FIELDS):
        return None
    return [int(x) for x in parts[1 : 1 + len(FIELDS)]]


def shares(before: list[int] | None, after: list[int] | None) -> dict[str, Any] | None:
    """Percent of all the host's CPU time between two samples: busy (user, nice, system,
    irq, softirq: the emulator and the probes included), iowait, steal; None without
    both samples or with no time between them."""
    if before is None or after is None:
        return None
    d = dict(zip(FIELDS, (a - b for a, b in zip(after, before, strict=True)), strict=True))
    total = sum(d.values())
    if total <= 0:
        return None
    busy = d["user"] + d["nice"] + d["system"] + d["irq"] + d["softirq"]
    return {
        "busy_pct": round(100 * busy / total, 2),
        "iowait_pct": round(100 * d["iowait"] / total, 2),
        "steal_pct": round(100 * d["steal"] / total, 2),
        "ticks": total,
        "source": "/proc/stat (cpu line) on the bridge's machine, over the receipt",
    }


def blame(host_cpu: dict[str, Any] | None) -> str:
    """A clause for a failed receipt's message where the host gave CPU away, or ''."""
    if not host_cpu or host_cpu.get("steal_pct", 0) < STEAL_NOTABLE_PCT:
        return ""
    return (
        f"; the host lost {host_cpu['steal_pct']:.1f} % of its CPU time to steal while the "
        "link was measured (a busy virtual machine, not the emulator's settings)"
    )
