"""Google QUIC (gQUIC Q039/Q043/Q044) with quicbed's server on quic-go v0.10.2 (go/gquic).

The reference study's other half compared gQUIC with TCP. Its Q037 needs a 2017
toolchain (testbed only: roles/quic_server_gquic); locally the nearest versions run:
quic-go v0.10.2 (patched: it destroyed the request packets Chromium sends with its
hello, go/gquic/README.md) as the server and Chromium 72 as the client. Every arm of
a gQUIC cell runs in Chromium 72 (``client``), the TCP arm too, so the browser is
not a confound; that TCP arm speaks TLS 1.2 unless it says otherwise, as the study's
gQUIC half did (``tls_for_tcp``).

The evidence of a load: the server's ``conn`` lines name the wire version each
connection negotiated (read from the session) and whether it took a REJ (0-RTT is
exactly no REJ); the page's protocol (``http/2+quic/39``) must name the same version.
v0.10.2's congestion control is CUBIC with N = 2 and beta 0.7, constants of its
source (checked by go/gquic's tests), so ``cubic`` is the only CC an arm may name.

What the sender ran under is on record too (``load_facts``; go/gquic/README.md,
"Log"): per connection the handshake's round trips (one per REJ), the
client's flow-control windows read back from the server's session, the congestion
window's cap, and the most bytes the server sent in a window of about one RTT. A load
whose server was held below the cell's bandwidth-delay product, by a window (flow
control or the cwnd cap) or by anything else on a loss-free link (a pacing cap
like the one that held v0.10.2 to about 12.5 Mbit/s: docs/gquic-cap.md), is invalid
with the numbers, so a capped server never passes for a protocol result.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from quicbed.errors import QuicbedError
from quicbed.jsonlines import json_events
from quicbed.model.link import LinkCondition
from quicbed.servers.quic_go import OwnH3Server
from quicbed.servers.webserver import Arm, Params

#: the versions quic-go v0.10.2 and Chromium 72 both speak, default first
VERSIONS = ("Q039", "Q043", "Q044")
#: what the TCP arm of a gQUIC cell speaks unless set: the study's gQUIC half ran
#: TCP+TLS 1.2+HTTP/2 against gQUIC (TLS 1.3 did not exist for it)
TCP_TLS = "1.2"


#: a transfer this many BDPs long must have had a flight of at least FLIGHT_SHARE x BDP in
#: one RTT on a loss-free link: CUBIC's slow start doubles the flight each RTT from
#: 46.7 kB, so a sender that is not capped has passed the BDP before it sent 2 x BDP
JUDGE_BDPS = 4.0
FLIGHT_SHARE = 0.5


def window_facts(lines: list[str]) -> dict[str, Any]:
    """What the gQUIC server's log says a load's sender ran under (one list entry per
    ``conn`` line, in order; a server built before these records logs none: None).

    - ``handshake_rtts``: round trips before the client's hello was accepted, one per
      REJ: 0 on a 0-RTT connection (its requests went with the hello and are answered
      with the SHLO), 2 on a first contact;
    - ``window_limit``, ``window_limit_bytes``: the smallest of the client's stream and
      connection flow-control windows and the congestion window's cap, per connection;
    - ``client_sfcw``, ``client_cfcw``: the client's windows (Chromium 72: 6 and 15 MiB);
    - ``flight``: of the connection that sent the most, its bytes sent and the most it
      sent in any window of 10, 20, 40, 80 and 160 ms (``peak_bytes``, keys in ms),
      from its last request line (written once the response was handed to quic-go).
    """
    ev = json_events(lines)
    conns = [e for e in ev if e.get("event") == "conn"]
    flights: dict[Any, dict[str, Any]] = {}
    for e in ev:
        fl = e.get("flight") if e.get("event") == "request" else None
        cid = e.get("conn_id")
        known = flights.get(cid, {}).get("sent_bytes", -1)
        if isinstance(fl, dict) and cid is not None and fl.get("sent_bytes", 0) >= known:
            flights[cid] = fl
    limits = [c.get("window_limit_bytes") for c in conns]
    return {
        "handshake_rtts": [c.get("handshake_rtts") for c in conns],
        "window_limit": sorted({str(c["window_limit"]) for c in conns if c.get("window_limit")}),
        "window_limit_bytes": min((x for x in limits if x is not None), default=None),
        "client_sfcw": sorted({c["client_sfcw"] for c in conns if c.get("client_sfcw")}),
        "client_cfcw": sorted({c["client_cfcw"] for c in conns if c.get("client_cfcw")}),
        "flight": max(flights.values(), key=lambda f: f.get("sent_bytes", 0), default=None),
    }


def flight_per_rtt(flight: dict[str, Any] | None, rtt_ms: float) -> float | None:
    """The most bytes sent in one RTT, from the flight record's window nearest above the
    RTT scaled to it (a lower bound's estimate: the sender's best 160 ms at 112 ms RTT
    counts 0.7 of it); None without a record or a window that long."""
    if not flight or not rtt_ms:
        return None
    peaks = {float(k): float(v) for k, v in (flight.get("peak_bytes") or {}).items()}
    longer = [w for w in peaks if w >= rtt_ms]
    if not longer:
        return None
    w = min(longer)
    return peaks[w] * rtt_ms / w


def window_reasons(facts: dict[str, Any], cond: LinkCondition | None) -> list[str]:
    """Why a load's sender was held below the cell's BDP (empty: it was not, or it cannot
    be told: no rate limit, no record). A window below the BDP counts once the
    connection sent more than it; the flight is judged on loss-free links only (with
    loss, CUBIC's backoff keeps it below the BDP legitimately) and on transfers of at
    least ``JUDGE_BDPS`` BDPs."""
    bdp = cond.bdp_bytes() if cond is not None else None
    if cond is None or not bdp:
        return []
    rtt = cond.rtt()
    out = []
    fl = facts.get("flight") or {}
    sent = float(fl.get("sent_bytes") or 0)
    limit = facts.get("window_limit_bytes")
    if limit is not None and limit < bdp and sent > limit:
        out.append(
            f"the gQUIC server ran under a window of {limit / 1e3:.0f} kB "
            f"({', '.join(facts.get('window_limit') or [])}), below the cell's BDP of "
            f"{bdp / 1e3:.0f} kB"
        )
    per_rtt = flight_per_rtt(fl, rtt)
    lossless = not (cond.loss_pct or cond.loss_down_pct or cond.loss_up_pct)
    if (
        lossless
        and per_rtt is not None
        and sent >= JUDGE_BDPS * bdp
        and per_rtt < FLIGHT_SHARE * bdp
    ):
        out.append(
            f"the gQUIC server sent at most {per_rtt / 1e3:.0f} kB in one RTT "
            f"({per_rtt * 8 / rtt / 1e3:.1f} Mbit/s) of {sent / 1e6:.1f} MB on a loss-free "
            f"link whose BDP is {bdp / 1e3:.0f} kB: a sender cap, not the protocol"
        )
    return out


def window_summary(loads: list[dict[str, Any]], cond: LinkCondition | None) -> str | None:
    """One line on what an arm's loads ran under, for a report or a cell's summary, from
    their server facts (``window_facts``): the handshake round trips seen, the smallest
    window against the BDP, and the median flight per RTT against the BDP; None when no
    load has the record (a server built before it)."""
    rec = [f for f in loads if f.get("window_limit_bytes") is not None]
    if not rec:
        return None
    rtts = sorted({r for f in rec for r in f.get("handshake_rtts") or [] if r is not None})
    limit = min(f["window_limit_bytes"] for f in rec)
    by = sorted({w for f in rec for w in f.get("window_limit") or []})
    bdp = cond.bdp_bytes() if cond is not None else None
    parts = [
        f"handshake round trips {', '.join(map(str, rtts)) or '-'}",
        f"window limit {limit / 1e3:.0f} kB ({', '.join(by)})",
    ]
    if cond is not None and bdp:
        flights = [x for f in rec if (x := flight_per_rtt(f.get("flight"), cond.rtt()))]
        parts[-1] += f", BDP {bdp / 1e3:.0f} kB"
        if flights:
            mid = sorted(flights)[len(flights) // 2]
            parts.append(f"flight per RTT {mid / 1e3:.0f} kB (median of {len(flights)})")
    return "; ".join(parts)


class GquicParams(Params):
    quic_version: str | None = Field(default=None, description="gQUIC version, e.g. Q039")


class GquicServer(OwnH3Server):
    name = "gquic"
    source_files = ("go/gquic/go.mod", "go/gquic/go.sum")
    protocol = "gquic"
    transport = "udp"
    log_name = "gquic-server.jsonl"
    binary = "quicbed-gquic-server"
    software_name = binary  # its build in build/bin is what the software check reads
    arms = ("gquic",)
    ccs = ("cubic",)
    Params = GquicParams
    #: Chromium 72 loads pages; no transfer client speaks gQUIC
    kinds = ("page",)
    client = "chromium72"
    key_exchange_unpinned: ClassVar[str] = (
        "cannot pin a key exchange: gQUIC's handshake is QUIC crypto (its own key "
        "exchange, Curve25519 or P-256), not TLS 1.3"
    )
    knob_refusals: ClassVar[dict[str, str]] = dict.fromkeys(
        ("udp_rcvbuf", "udp_sndbuf", "client_udp_rcvbuf", "client_udp_sndbuf", "gso", "aead"),
        "cannot apply it: gQUIC's quic-go v0.10.2 has none of these knobs (its crypto is "
        "gQUIC's own handshake, not TLS 1.3)",
    )
    tcp_tls = TCP_TLS

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check_arm(arm, cc, params)
        v = params.get("quic_version", VERSIONS[0])
        if v not in VERSIONS:
            raise QuicbedError(
                f"arm {arm}: quic_version {v!r} is not one quicbed's gQUIC server "
                f"and Chromium 72 speak ({', '.join(VERSIONS)})"
            )
        return params

    @classmethod
    def wire(cls, arm: Arm) -> str:
        return f"gQUIC {arm.params.get('quic_version', VERSIONS[0])}"

    @classmethod
    def against_study(cls, arm: Arm) -> str | None:
        return (
            f"quic-go v0.10.2 (patched) speaking {cls.wire(arm)}, not the study's proto-quic "
            "server with Q037: its CUBIC and loss detection are quic-go's of 2018"
        )

    @property
    def quic_version(self) -> str:
        return str(self.arm.params.get("quic_version", VERSIONS[0]))

    def page_protocol(self) -> str:
        """What Chromium 72 calls the protocol of a gQUIC response: ``http/2+quic/39``."""
        return f"http/2+quic/{int(self.quic_version[1:])}"

    def argv(self) -> list[str]:
        s, a = self.spec, self.arm
        return [
            str(self.tb.bin_path("server", self.binary)),
            "-addr",
            f"{self.tb.server_ip}:{a.port}",
            "-docroot",
            str(s.docroot),
            "-cert",
            str(s.cert),
            "-key",
            str(s.key),
            "-log",
            str(self.log),
            "-versions",
            self.quic_version,
        ]

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        facts = super().load_facts(lines)
        facts.update(window_facts(lines))
        return facts

    def evidence(self, facts: dict[str, Any]) -> list[str]:
        return super().evidence(facts) + window_reasons(facts, self.condition)

    @classmethod
    def record_line(cls, loads: list[dict[str, Any]], cond: LinkCondition | None) -> str | None:
        return window_summary(loads, cond)

    def param_evidence(self, facts: dict[str, Any]) -> list[str]:
        seen = facts.get("quic_versions")
        if seen != [self.quic_version]:
            return [
                f"the server's connections negotiated {','.join(seen or []) or 'nothing'}, "
                f"not {self.quic_version}"
            ]
        return []
