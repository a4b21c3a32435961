"""Counters per role around a load or flow: UDP receive-buffer errors, interface drops.

Where a stack, not the link, loses packets: a UDP socket whose receive buffer is full
drops datagrams (``RcvbufErrors``, counted in ``InErrors`` too, in the role's
``/proc/net/snmp``); a device drops frames it cannot queue (``/proc/net/dev``). Both
are per network namespace, so each role's figures are its own, read on the role
(quicbed.run.netcounters) before and after each load and flow; the difference is
stored with it: RunRow.detail["counters"], FlowResult.counters, CompeteRun.counters.
The ACK ratio of a QUIC flow (packets its client sent per packet it received) comes
from the stacks' own counters (quicbed.results.transfers.ack_ratio).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: /proc/net/snmp's Udp fields kept, by the names they are stored under
UDP_FIELDS = {
    "InDatagrams": "udp_in_datagrams",
    "OutDatagrams": "udp_out_datagrams",
    "InErrors": "udp_in_errors",
    "RcvbufErrors": "udp_rcvbuf_errors",
    "SndbufErrors": "udp_sndbuf_errors",
}
#: /proc/net/dev's columns kept (receive: 0..7, transmit: 8..15)
DEV_FIELDS = {2: "rx_errors", 3: "rx_dropped", 10: "tx_errors", 11: "tx_dropped"}


class RoleCounters(BaseModel):
    """One role's counters over a load or flow (its namespace's, or its host's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    udp_in_datagrams: int = 0
    udp_out_datagrams: int = 0
    udp_in_errors: int = 0
    udp_rcvbuf_errors: int = 0
    udp_sndbuf_errors: int = 0
    #: summed over the role's interfaces (``ifaces``), loopback left out
    rx_dropped: int = 0
    tx_dropped: int = 0
    rx_errors: int = 0
    tx_errors: int = 0
    ifaces: list[str] = Field(default_factory=list)

    @property
    def drops(self) -> int:
        return self.rx_dropped + self.tx_dropped


def parse(snmp: str, dev: str, ifaces: list[str] | None = None) -> dict[str, Any]:
    """The kept counters from ``/proc/net/snmp`` and ``/proc/net/dev`` as read on a role,
    interfaces summed (those named, else every one but loopback)."""
    from quicbed.procnet import dev_table, snmp_table

    udp = snmp_table(snmp).get("Udp", {})
    out: dict[str, Any] = {key: udp.get(name, 0) for name, key in UDP_FIELDS.items()}
    out |= dict.fromkeys(DEV_FIELDS.values(), 0)
    seen = []
    for name, cols in dev_table(dev).items():
        if ifaces and name not in ifaces:
            continue
        seen.append(name)
        for i, key in DEV_FIELDS.items():
            out[key] += cols[i]
    out["ifaces"] = sorted(seen)
    return out


def difference(before: dict[str, Any], after: dict[str, Any]) -> RoleCounters:
    """What the counters grew by between two readings of one role."""
    grew = {k: after[k] - before.get(k, 0) for k in after if k != "ifaces"}
    return RoleCounters(**grew, ifaces=after.get("ifaces", []))
