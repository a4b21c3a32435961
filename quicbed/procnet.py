"""A role's kernel network counters: ``/proc/net/snmp`` and ``/proc/net/dev``.

Both are per network namespace, so they are read on the role, in one command, and
parsed here into tables: the per-load counters (quicbed.results.netcounters) and the
server's sends that show GSO (quicbed.settings.sockopts) take their figures from them.
"""

from __future__ import annotations

from typing import Any

_SPLIT = "--quicbed-dev--"


def read(tb: Any, role: str) -> tuple[str, str] | str:
    """``(snmp, dev)``: the two files as ``role`` sees them now, or why they could not be
    read (the command's last line of error)."""
    script = f"cat /proc/net/snmp && echo {_SPLIT} && cat /proc/net/dev"
    cp = tb.exec(role, ["sh", "-c", script], check=False)
    snmp, sep, dev = cp.stdout.partition(_SPLIT)
    if cp.returncode != 0 or not sep:
        lines = (cp.stderr or "no output").strip().splitlines()
        return lines[-1] if lines else "no output"
    return snmp, dev


def snmp_table(snmp: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp`` by protocol (``Udp``, ``Tcp``, ...): each field's value (the
    file gives each protocol a line of names, then a line of values)."""
    rows: dict[str, list[list[str]]] = {}
    for line in snmp.splitlines():
        proto, colon, rest = line.partition(":")
        if colon:
            rows.setdefault(proto, []).append(rest.split())
    return {
        proto: {name: int(v) for name, v in zip(r[0], r[1], strict=False)}
        for proto, r in rows.items()
        if len(r) >= 2
    }


def dev_table(dev: str) -> dict[str, list[int]]:
    """``/proc/net/dev`` by interface, loopback left out: its 16 columns (receive 0..7,
    transmit 8..15)."""
    out = {}
    for line in dev.splitlines():
        name, colon, rest = line.partition(":")
        name = name.strip()
        if colon and "|" not in line and name != "lo":
            out[name] = [int(x) for x in rest.split()]
    return out
