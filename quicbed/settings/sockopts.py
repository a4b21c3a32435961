"""Host and socket knobs of a QUIC arm as verified parameters: UDP socket buffers, AEAD.

The implementation studies (TUM, "Analysis of Performance Limitations in QUIC
Implementations") move goodput by the endpoints' UDP buffers and cipher. Here they are
arm settings, checked like the transport parameters (quicbed.settings.tparams): each stack
declares what it can apply in its own ``Params`` and refuses the rest by name
(``WebServer.knob_refusals``); every load and flow is checked against what the kernel and
the connection report after it, and one that differs is invalid with the reason.

**UDP buffers** (``udp_rcvbuf``, ``udp_sndbuf``: the server's socket; ``client_udp_rcvbuf``,
``client_udp_sndbuf``: the transfer client's, quicbed-bulk), in bytes, as asked of
SO_RCVBUF/SO_SNDBUF. Linux doubles what it is asked (socket(7): room for its bookkeeping)
and caps the request at ``net.core.rmem_max``/``wmem_max``, which are host-wide (a
network namespace cannot write them), so they are raised, where too small, through
:mod:`quicbed.hostparam`'s lock and restored after (:func:`limits_raised`). The server's
socket is read back after every load or flow from outside the server (``ss -uam`` in the
server's namespace: skmem ``rb`` and ``tb``); a flow's client socket, which is gone when
the flow ends, by the client itself (getsockopt right after setting it, in its final
record). Both must be exactly twice the request.

**AEAD** (``aead``): the TLS 1.3 cipher suite the server's connections negotiate, read
from the server's conn record (and a flow's client record): ``aes-128-gcm``,
``aes-256-gcm``, ``chacha20-poly1305``.

**Application GSO** (``gso``: true/false): whether the server hands the kernel several
QUIC packets per sendmsg (UDP_SEGMENT). Observed, not echoed: around each load or flow
the server's namespace counts its UDP sendmsg calls (``/proc/net/snmp`` Udp
OutDatagrams, one per call) and the packets its interfaces sent (``/proc/net/dev``,
less TCP segments and ICMP messages): with the veths' offloads off the kernel segments
a GSO datagram in software before the device, so more packets than datagrams means
GSO ran. A NIC that segments UDP itself may count one packet per datagram, so the knob
is refused on the ssh testbed (:func:`check_gso_testbed`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from quicbed.errors import QuicbedError

#: the server's buffers and the transfer client's, in bytes (SO_RCVBUF, SO_SNDBUF)
BUFFERS = ("udp_rcvbuf", "udp_sndbuf")
CLIENT_BUFFERS = tuple("client_" + k for k in BUFFERS)
#: the TLS 1.3 AEADs by quicbed's name, and the cipher suite each is (as Go names it)
AEADS = {
    "aes-128-gcm": "TLS_AES_128_GCM_SHA256",
    "aes-256-gcm": "TLS_AES_256_GCM_SHA384",
    "chacha20-poly1305": "TLS_CHACHA20_POLY1305_SHA256",
}
KEYS = (*BUFFERS, *CLIENT_BUFFERS, "aead", "gso")
#: a request below this is raised by the kernel to its floor (SOCK_MIN_RCVBUF about
#: 2.3 KiB, SOCK_MIN_SNDBUF about 4.6 KiB after doubling), so it could not read back as
#: twice itself
BUFFER_MIN = 4096
#: the kernel keeps the doubled value in an int and caps the request at INT_MAX / 2
BUFFER_MAX = 2**31 // 2 - 1
#: the host-wide caps, per buffer key (both ends' keys)
SYSCTL = {
    "udp_rcvbuf": "/proc/sys/net/core/rmem_max",
    "udp_sndbuf": "/proc/sys/net/core/wmem_max",
}
#: the role whose socket each buffer key sets
ROLE = {"udp_rcvbuf": "server", "udp_sndbuf": "server"} | {"client_" + k: "client" for k in BUFFERS}


def is_key(key: str) -> bool:
    return key in KEYS


def base(key: str) -> str:
    return key.removeprefix("client_")


def shown(v: Any) -> str:
    """A knob's value as a spec spells it (``false``, not ``False``)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def describe(params: Mapping[str, Any]) -> str:
    """An arm's knobs as a table cell says them: ``udp_rcvbuf=106496;gso=false``."""
    return ";".join(f"{k}={shown(params[k])}" for k in KEYS if params.get(k) is not None)


def buffer_bound(key: str, v: int | None) -> int | None:
    """A pydantic validator's body: the kernel's range for one buffer key."""
    if v is not None and not BUFFER_MIN <= v <= BUFFER_MAX:
        raise ValueError(
            f"{key} {v}: a UDP socket buffer is {BUFFER_MIN}..{BUFFER_MAX} bytes (Linux "
            "doubles the request into an int, and raises one below its floor)"
        )
    return v


def aead_name(v: str | None) -> str | None:
    if v is not None and v not in AEADS:
        raise ValueError(f"aead {v!r} is not one of {', '.join(AEADS)}")
    return v


def refuse(arm: str, who: str, params: Mapping[str, Any], why: Mapping[str, str]) -> None:
    """Refuse the first knob of ``params`` that ``why`` (a stack's ``knob_refusals``, keyed
    by knob or ``knob=value``) has a reason for, naming it, its value and the reason."""
    for key in KEYS:
        v = params.get(key)
        if v is None:
            continue
        reason = why.get(f"{key}={shown(v)}") or why.get(key)
        if reason:
            raise QuicbedError(f"arm {arm}: {key} {shown(v)}: {who} {reason}")


class AeadKnob(BaseModel):
    """The field of the ``Params`` of a stack whose server can pin the TLS 1.3 cipher
    suite (a base of it, as :class:`SocketKnobs` is): Apache's over TCP, quic-go's."""

    aead: str | None = Field(default=None, description="the TLS 1.3 AEAD: " + ", ".join(AEADS))

    @field_validator("aead")
    @classmethod
    def _aead(cls, v: str | None) -> str | None:
        return aead_name(v)


class SocketKnobs(AeadKnob):
    """The fields of the ``Params`` of a stack that can apply these knobs (a base of it,
    beside quicbed.servers.webserver.Params): typed and bounded here, so every stack takes
    them alike; what a stack cannot do of them is its ``knob_refusals``."""

    udp_rcvbuf: int | None = Field(default=None, description="bytes (SO_RCVBUF; Linux doubles it)")
    udp_sndbuf: int | None = Field(default=None, description="bytes (SO_SNDBUF; Linux doubles it)")
    client_udp_rcvbuf: int | None = Field(
        default=None, description="bytes (the transfer client's SO_RCVBUF)"
    )
    client_udp_sndbuf: int | None = Field(
        default=None, description="bytes (the transfer client's SO_SNDBUF)"
    )
    gso: bool | None = Field(
        default=None, description="the server's UDP generic segmentation offload (UDP_SEGMENT)"
    )

    @field_validator(*BUFFERS, *CLIENT_BUFFERS)
    @classmethod
    def _buffer(cls, v: int | None, info: ValidationInfo) -> int | None:
        return buffer_bound(str(info.field_name), v)


#: what the client of each kind of cell can set of the client's buffers
CLIENT_SUPPORT = {
    "bulk": None,
    "compete": None,
    "page": "the browser's UDP socket is its own: neither Chromium nor Firefox has a "
    "switch for its buffers",
}


def check_client(arm: str, kind: str, params: Mapping[str, Any]) -> None:
    """Refuse a client buffer the client of a ``kind`` cell cannot set."""
    why = CLIENT_SUPPORT.get(kind)
    for key in CLIENT_BUFFERS:
        if why and params.get(key) is not None:
            raise QuicbedError(f"arm {arm}: {key} {params[key]}: {why}")


# --- the host's caps ------------------------------------------------------------------
@contextmanager
def limits_raised(tb: Any, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """``net.core.rmem_max``/``wmem_max`` at least the buffers ``params`` ask for, on the
    host of each role that sets one, for the block: raised through quicbed.hostparam's
    lock (refused by name when another testbed holds a different value), restored when
    the last holder lets go; a cap already high enough is left alone. Yields what each
    host had (``{role: {sysctl: value}}``) for the record."""
    from quicbed import hostparam

    need: dict[tuple[str, str], int] = {}
    for key in (*BUFFERS, *CLIENT_BUFFERS):
        if params.get(key) is not None:
            path = SYSCTL[base(key)]
            role = ROLE[key]
            if tb.shared_host_sysctls:
                role = "server"  # one host: one cap
            need[(role, path)] = max(need.get((role, path), 0), int(params[key]))
    seen: dict[str, Any] = {}
    with ExitStack() as held:
        for (role, path), value in need.items():
            held.enter_context(hostparam.at_least(tb, path, value, role))
            seen.setdefault(role, {})[path.rsplit("/", 1)[1]] = int(
                hostparam.call(tb, "read", path, "", "", role=role)["current"]
            )
        yield seen


# --- reading back -----------------------------------------------------------------------
def parse_ss(text: str) -> dict[str, int] | None:
    """The first socket's skmem ``rb`` and ``tb`` of ``ss -uamnH`` output (None: none)."""
    import re

    m = re.search(r"skmem:\([^)]*\brb(\d+)[^)]*\btb(\d+)", text)
    return {"rb": int(m.group(1)), "tb": int(m.group(2))} if m else None


def read_socket(tb: Any, role: str, port: int) -> dict[str, Any]:
    """``udp_socket``: the buffers of the UDP socket bound to ``port`` on ``role``, as the
    kernel holds them (``ss -uam``), or ``udp_socket_problem``."""
    cp = tb.exec(role, ["ss", "-uamnH", f"( sport = :{port} )"], check=False)
    got = parse_ss(cp.stdout) if cp.returncode == 0 else None
    if got is None:
        why = cp.stderr.strip()[:200] or f"no UDP socket on port {port}"
        return {"udp_socket_problem": f"ss -uam on the {role}: {why}"}
    return {"udp_socket": got}


#: packets an interface may send in a load besides IP ones (ARP): the slack of GSO's test
GSO_SLACK = 2


def read_sends(tb: Any, role: str) -> dict[str, int] | None:
    """``role``'s UDP datagrams sent (sendmsg calls), TCP segments, ICMP messages and the
    packets its interfaces (all but loopback) sent, now; None: unreadable."""
    from quicbed import procnet

    got = procnet.read(tb, role)
    if isinstance(got, str):
        return None
    snmp, dev = procnet.snmp_table(got[0]), procnet.dev_table(got[1])
    return {
        "udp_out_datagrams": snmp.get("Udp", {}).get("OutDatagrams", 0),
        "tcp_out_segs": snmp.get("Tcp", {}).get("OutSegs", 0),
        "icmp_out_msgs": snmp.get("Icmp", {}).get("OutMsgs", 0),
        "tx_packets": sum(cols[9] for cols in dev.values()),
    }


def sends_since(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, Any]:
    """``udp_sends``: what a role sent between two :func:`read_sends` (or why unknown)."""
    if before is None or after is None:
        return {"udp_sends_problem": "the server's counters could not be read"}
    return {"udp_sends": {k: after[k] - before[k] for k in after}}


def check_gso_testbed(arm: str, tb: Any) -> None:
    """Refuse ``gso`` on a testbed whose interfaces do not show it
    (``counts_gso_segments``): only the local testbed's veths, all offloads off
    (LocalTestbed.check_offloads), segment a GSO datagram in software before the device
    counts it; a real NIC with UDP segmentation offload counts per datagram or per
    segment as its driver does."""
    if not tb.counts_gso_segments:
        raise QuicbedError(
            f"arm {arm}: gso is verified only on the local testbed (its veths count the "
            f"segments of a GSO datagram); a {tb.kind} testbed's NICs may segment UDP "
            "themselves and count it as one packet"
        )


def evidence(params: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """Why a load's or flow's server facts do not show the arm's server knobs: the
    socket read back (``udp_socket``: twice each buffer asked for) and the AEAD of every
    connection (``tls_cipher``)."""
    reasons: list[str] = []
    asked = {k: params[k] for k in BUFFERS if params.get(k) is not None}
    if asked:
        sock = facts.get("udp_socket")
        if sock is None:
            why = facts.get("udp_socket_problem", "not read back")
            reasons.append(f"the server's UDP buffers were not read back: {why}")
        else:
            for key, field in (("udp_rcvbuf", "rb"), ("udp_sndbuf", "tb")):
                if key in asked and sock.get(field) != 2 * asked[key]:
                    reasons.append(
                        f"the server's UDP socket had {field} {sock.get(field)} after this "
                        f"load, not {2 * asked[key]} (twice {key} {asked[key]}: Linux doubles it)"
                    )
    if params.get("aead") is not None:
        want = AEADS[params["aead"]]
        got = facts.get("tls_cipher")
        if got != [want]:
            reasons.append(f"the server's connections negotiated {got or 'no cipher'}, not {want}")
    if params.get("gso") is not None:
        reasons += gso_evidence(bool(params["gso"]), facts)
    return reasons


def gso_evidence(want: bool, facts: Mapping[str, Any]) -> list[str]:
    """GSO on: the server's interfaces sent more packets than its UDP sendmsg calls
    (beyond :data:`GSO_SLACK`); off: no more."""
    sends = facts.get("udp_sends")
    if sends is None:
        why = facts.get("udp_sends_problem", "not read")
        return [f"the server's GSO was not observed: {why}"]
    datagrams = sends["udp_out_datagrams"]
    packets = sends["tx_packets"] - sends["tcp_out_segs"] - sends["icmp_out_msgs"]
    split = packets - datagrams
    if want and split <= GSO_SLACK:
        return [
            f"GSO not seen: the server sent {packets} packets for {datagrams} UDP "
            "datagrams, none segmented, but the arm sets gso: true"
        ]
    if not want and split > GSO_SLACK:
        return [
            f"GSO seen: the server sent {packets} packets for {datagrams} UDP datagrams, "
            "but the arm sets gso: false"
        ]
    return []


#: what quicbed-bulk's final record says of these knobs (kept with the flow)
CLIENT_RECORD = ("udp_rcvbuf", "udp_sndbuf", "tls_cipher")


def client_view(params: Mapping[str, Any], final: Mapping[str, Any]) -> list[str]:
    """Why a transfer client's own final record does not show the arm's client buffers
    (the client's getsockopt after setting them) and AEAD (what its connection
    negotiated)."""
    reasons: list[str] = []
    for key in CLIENT_BUFFERS:
        want = params.get(key)
        if want is not None and final.get(base(key)) != 2 * want:
            reasons.append(
                f"the client's UDP socket had {base(key)} {final.get(base(key))}, not "
                f"{2 * want} (twice {key} {want}: Linux doubles it)"
            )
    if params.get("aead") is not None and final.get("tls_cipher") is not None:
        want_suite = AEADS[params["aead"]]
        if final["tls_cipher"] != want_suite:
            reasons.append(
                f"the client's connection negotiated {final['tls_cipher']}, not {want_suite}"
            )
    return reasons


def client_argv(params: Mapping[str, Any]) -> list[str]:
    """quicbed-bulk's flags for the arm's client buffers."""
    out: list[str] = []
    for key in CLIENT_BUFFERS:
        if params.get(key) is not None:
            out += [f"-{base(key).replace('_', '-')}", str(params[key])]
    return out
