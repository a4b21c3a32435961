"""TCP options of the TCP arm as verified parameters (the TUM 2023 study's knobs).

An arm over TCP may set ``tcp_sack``, ``tcp_ecn`` (0, 1, 2), ``tcp_window_scaling``,
``tcp_fastopen`` (the sysctl's bit mask), ``initcwnd`` (segments) and ``rmem`` (a
receive-buffer preset, :data:`RMEM_PRESETS`); unset means the host's default. While
the arm's server runs they are in force on **both** ends, the client's SYN being
the client's and the SYN-ACK the server's: ``net.ipv4.tcp_*`` sysctls of the server
and client namespaces (per namespace on the local testbed; on the ssh testbed they
are the hosts' global sysctls) and a host route toward the peer with ``initcwnd``
and, for ``rmem``, ``window`` (the route's window clamp: the host's global
``net.core.rmem_max`` would otherwise decide the window scale). Every value is read
before and restored afterwards, so cells sharing a testbed do not inherit them.

**Verified per load** from the handshake itself: tcpdump on the client's interface
captures only SYN and SYN-ACK segments of the arm's port (snaplen 128) for each load,
:func:`read_pcap` parses their options (SACK-permitted, window scale and its shift,
timestamps, TFO, and ECN setup: ECE+CWR on the SYN, ECE on the SYN-ACK), and
:func:`evidence` names every way they differ from the arm's settings, e.g. "the SYN
offered no SACK, but the arm sets tcp_sack: true": such a load is invalid. ``rmem``'s
evidence is the window scale shift of both. What a handshake cannot show is read
back from the kernels after each load instead: ``tcp_fastopen`` (Chromium never
sends a Fast Open SYN, so the option can only be seen to be absent) and ``initcwnd``
(the route as it stands).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from quicbed import pcap
from quicbed.errors import QuicbedError
from quicbed.testbed.lifecycle import Process, RPath, Testbed

#: the TCP options a TCP arm may set (the TCP stack's parameters of the same names), on
#: both ends while its server runs
OPTIONS = ("tcp_sack", "tcp_ecn", "tcp_window_scaling", "tcp_fastopen", "initcwnd", "rmem")
#: the sysctl behind each boolean/integer option (per network namespace)
SYSCTLS = {
    "tcp_sack": "net.ipv4.tcp_sack",
    "tcp_ecn": "net.ipv4.tcp_ecn",
    "tcp_window_scaling": "net.ipv4.tcp_window_scaling",
    "tcp_fastopen": "net.ipv4.tcp_fastopen",
}
#: receive-buffer presets: the largest receive buffer (``tcp_rmem``'s max and the route's
#: window clamp) and the window scale shift Linux then offers, 2^(15+shift) <= bytes <
#: 2^(16+shift); ``ws7`` is about Linux's default buffer (6 MiB)
RMEM_PRESETS = {
    "ws0": (65535, 0),
    "ws1": (131071, 1),
    "ws2": (262143, 2),
    "ws3": (524287, 3),
    "ws4": (1048575, 4),
    "ws7": (8388607, 7),
    "ws9": (33554431, 9),
    # the largest shift RFC 7323 allows (a 1 GiB window)
    "ws14": (1073741823, 14),
}
ENDS = ("server", "client")
#: bytes kept per SYN: Ethernet + IPv4 + the largest TCP header is 14 + 60 + 60
SNAPLEN = 134
_FLAG = {"fin": 0x01, "syn": 0x02, "rst": 0x04, "ack": 0x10, "ece": 0x40, "cwr": 0x80}


def wanted(params: dict[str, Any]) -> dict[str, Any]:
    """The TCP options among an arm's parameters."""
    return {k: params[k] for k in OPTIONS if params.get(k) is not None}


def check(arm: str, params: dict[str, Any]) -> None:
    """Refuse, naming the value, options that cannot be applied or cannot be verified."""
    p = wanted(params)
    if "tcp_ecn" in p and p["tcp_ecn"] not in (0, 1, 2):
        raise QuicbedError(
            f"arm {arm}: tcp_ecn must be 0 (off), 1 (request and accept) or "
            f"2 (accept only, Linux's default) (got {p['tcp_ecn']})"
        )
    if "tcp_fastopen" in p and not 0 <= p["tcp_fastopen"] <= 0xFFFF:
        raise QuicbedError(
            f"arm {arm}: tcp_fastopen is the sysctl's bit mask, 0..65535 (got {p['tcp_fastopen']})"
        )
    if "initcwnd" in p and not 1 <= p["initcwnd"] <= 1000:
        raise QuicbedError(f"arm {arm}: initcwnd must be 1..1000 segments (got {p['initcwnd']})")
    if "rmem" in p:
        if p["rmem"] not in RMEM_PRESETS:
            raise QuicbedError(
                f"arm {arm}: rmem {p['rmem']!r} is not a preset (one of {', '.join(RMEM_PRESETS)})"
            )
        if p.get("tcp_window_scaling") is False:
            raise QuicbedError(
                f"arm {arm}: rmem {p['rmem']} sets a window scale, but the arm "
                "sets tcp_window_scaling: false"
            )


# --- the handshake's options ------------------------------------------------------------
@dataclass
class Syn:
    """One SYN or SYN-ACK as seen on the wire (options None/False where absent)."""

    src: str
    sport: int
    dst: str
    dport: int
    ack: bool  # a SYN-ACK
    ece: bool
    cwr: bool
    mss: int | None = None
    wscale: int | None = None  # the shift
    sack: bool = False  # SACK-permitted
    timestamps: bool = False
    tfo: bool = False  # a Fast Open option (kind 34, or 254 with magic 0xF989)
    tfo_cookie: int = 0  # its cookie's length (0: a cookie request)


def parse_options(opts: bytes, syn: Syn) -> None:
    """Fill ``syn`` from the TCP options bytes (after the fixed 20-byte header)."""
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == 0:  # end of options
            break
        if kind == 1:  # no-op
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2 or i + opts[i + 1] > len(opts):
            break  # truncated or malformed: keep what was read
        size = opts[i + 1]
        body = opts[i + 2 : i + size]
        if kind == 2 and size == 4:
            syn.mss = int.from_bytes(body, "big")
        elif kind == 3 and size == 3:
            syn.wscale = body[0]
        elif kind == 4:
            syn.sack = True
        elif kind == 8:
            syn.timestamps = True
        elif kind == 34:
            syn.tfo, syn.tfo_cookie = True, size - 2
        elif kind == 254 and body[:2] == b"\xf9\x89":
            syn.tfo, syn.tfo_cookie = True, size - 4
        i += size


def parse_tcp(ip: bytes) -> Syn | None:
    """A SYN or SYN-ACK from an IPv4 packet, else None."""
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
        return None
    ihl = (ip[0] & 0x0F) * 4
    tcp = ip[ihl:]
    if len(tcp) < 20:
        return None
    flags = tcp[13]
    if not flags & _FLAG["syn"]:
        return None
    sport, dport = struct.unpack("!HH", tcp[:4])
    src, dst = (".".join(str(b) for b in ip[o : o + 4]) for o in (12, 16))
    syn = Syn(
        src,
        sport,
        dst,
        dport,
        ack=bool(flags & _FLAG["ack"]),
        ece=bool(flags & _FLAG["ece"]),
        cwr=bool(flags & _FLAG["cwr"]),
    )
    parse_options(tcp[20 : (tcp[12] >> 4) * 4], syn)
    return syn


def read_pcap(data: bytes) -> list[Syn]:
    """The SYNs and SYN-ACKs of a pcap file (quicbed.pcap)."""
    return [syn for p in pcap.packets(data) if (syn := parse_tcp(p.ip)) is not None]


# --- what a load must show --------------------------------------------------------------
def _offered(what: str, has: bool, setting: str, value: Any) -> str:
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    return (
        f"the {what} offered {'' if has else 'no '}{setting_name(setting)}, but the arm "
        f"sets {setting}: {shown}"
    )


def setting_name(setting: str) -> str:
    return {"tcp_sack": "SACK", "tcp_window_scaling": "window scaling"}.get(setting, setting)


def evidence(params: dict[str, Any], facts: dict[str, Any]) -> list[str]:
    """Why a load's handshakes (``facts["tcp_syn"]``, from :func:`read_pcap`) and the
    kernels' values read back after it (``facts["tcp_kernel"]``) do not show the arm's
    TCP options; [] when they do or the arm sets none."""
    want = wanted(params)
    if not want:
        return []
    if facts.get("tcp_syn_problem"):
        return [f"TCP options not verified: {facts['tcp_syn_problem']}"]
    pkts = facts.get("tcp_syn") or []
    syns = [p for p in pkts if not p["ack"]]
    acks = [p for p in pkts if p["ack"]]
    reasons: list[str] = []

    def once(text: str) -> None:
        if text not in reasons:
            reasons.append(text)

    if not syns or not acks:
        once(
            f"the capture holds {len(syns)} SYN(s) and {len(acks)} SYN-ACK(s) of this "
            "load: its TCP options are not verified"
        )
    for what, group in (("SYN", syns), ("SYN-ACK", acks)):
        for p in group:
            for key, field in (("tcp_sack", "sack"), ("tcp_window_scaling", "wscale")):
                if key in want:
                    has = bool(p[field]) if field == "sack" else p[field] is not None
                    if has != want[key]:
                        once(_offered(what, has, key, want[key]))
            if "tcp_ecn" in want:
                should = want["tcp_ecn"] == 1  # 2 accepts only, and both ends set it
                if what == "SYN":
                    asks = p["ece"] and p["cwr"]
                    said = "asked for ECN (ECE+CWR)" if asks else "did not ask for ECN (ECE+CWR)"
                else:
                    asks = p["ece"] and not p["cwr"]
                    said = "accepted ECN (ECE)" if asks else "did not accept ECN (ECE)"
                if asks != should:
                    once(f"the {what} {said}, but the arm sets tcp_ecn: {want['tcp_ecn']}")
            if "rmem" in want:
                shift = RMEM_PRESETS[want["rmem"]][1]
                if p["wscale"] != shift:
                    seen = (
                        "no window scale"
                        if p["wscale"] is None
                        else f"window scale shift {p['wscale']}"
                    )
                    once(
                        f"the {what} offered {seen}, but the arm's rmem {want['rmem']} "
                        f"gives shift {shift}"
                    )
            if want.get("tcp_fastopen") == 0 and p["tfo"]:
                once(f"the {what} carried a TCP Fast Open option, but the arm sets tcp_fastopen: 0")
    kernel = facts.get("tcp_kernel") or {}
    for role in ENDS:
        got = kernel.get(role) or {}
        if "tcp_fastopen" in want and got.get("tcp_fastopen") != want["tcp_fastopen"]:
            once(
                f"the {role}'s {SYSCTLS['tcp_fastopen']} was {got.get('tcp_fastopen')} after "
                f"this load, not {want['tcp_fastopen']}"
            )
        if "initcwnd" in want and got.get("initcwnd") != want["initcwnd"]:
            once(
                f"the {role}'s route to its peer had initcwnd {got.get('initcwnd')} after "
                f"this load, not {want['initcwnd']}"
            )
    return reasons


# --- applying them ----------------------------------------------------------------------
def _peer(tb: Testbed, role: str) -> str:
    return tb.client_ip if role == "server" else tb.server_ip


def _route(tb: Testbed, role: str) -> list[str]:
    """The words of ``ip route get`` toward the peer that a host route keeps (dev, via)."""
    out = tb.exec(role, ["ip", "-o", "route", "get", _peer(tb, role)]).stdout.split()
    keep: list[str] = []
    for key in ("via", "dev"):
        if key in out:
            keep += [key, out[out.index(key) + 1]]
    return keep


def _host_route(tb: Testbed, role: str) -> str:
    return tb.exec(
        role, ["ip", "-o", "route", "show", "exact", f"{_peer(tb, role)}/32"], check=False
    ).stdout.strip()


@contextmanager
def applied(tb: Testbed, params: dict[str, Any]) -> Iterator[None]:
    """The arm's TCP options in force on the server and the client; every sysctl back to
    its value and the host route gone afterwards (also when applying fails halfway)."""
    want = wanted(params)
    undo: list[tuple[str, str, str]] = []  # (role, key, old value)
    routes: list[str] = []
    try:
        for role in ENDS if want else ():
            keys = {SYSCTLS[k]: str(int(want[k])) for k in SYSCTLS if k in want}
            if "rmem" in want:
                old = tb.read_sysctl(role, "net.ipv4.tcp_rmem").split()
                top = RMEM_PRESETS[want["rmem"]][0]
                keys["net.ipv4.tcp_rmem"] = f"{old[0]} {min(int(old[1]), top)} {top}"
            for key, value in keys.items():
                undo.append((role, key, " ".join(tb.read_sysctl(role, key).split())))
                tb.sysctl(role, key, value)
            metrics = []
            if "initcwnd" in want:
                metrics += ["initcwnd", str(want["initcwnd"])]
            if "rmem" in want:
                metrics += ["window", str(RMEM_PRESETS[want["rmem"]][0])]
            if metrics:
                if _host_route(tb, role):
                    raise QuicbedError(
                        f"{tb.name(role)} has a host route to "
                        f"{_peer(tb, role)} already; quicbed will not "
                        "replace it for initcwnd/rmem"
                    )
                tb.exec(
                    role,
                    ["ip", "route", "add", f"{_peer(tb, role)}/32", *_route(tb, role), *metrics],
                )
                routes.append(role)
        yield
    finally:
        for role in reversed(routes):
            tb.exec(role, ["ip", "route", "del", f"{_peer(tb, role)}/32"], check=False)
        for role, key, value in reversed(undo):
            tb.exec(role, ["sysctl", "-q", "-w", f"{key}={value}"], check=False)


def read_kernel(tb: Testbed, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the kernels hold now of the options a handshake cannot show."""
    want = wanted(params)
    out: dict[str, dict[str, Any]] = {}
    for role in ENDS:
        got: dict[str, Any] = {}
        if "tcp_fastopen" in want:
            got["tcp_fastopen"] = int(tb.read_sysctl(role, SYSCTLS["tcp_fastopen"]))
        if "initcwnd" in want:
            words = _host_route(tb, role).split()
            got["initcwnd"] = (
                int(words[words.index("initcwnd") + 1]) if "initcwnd" in words else None
            )
        if got:
            out[role] = got
    return out


# --- one capture per load ---------------------------------------------------------------
class SynCapture:
    """tcpdump of the SYNs and SYN-ACKs of one TCP port on the client, one load at a time
    (quicbed.traces.capture's start/stop helpers)."""

    def __init__(self, tb: Testbed, port: int, name: str) -> None:
        self.tb, self.port = tb, port
        folder = tb.workdir("client") / "tcpopts"
        self.pcap: RPath = folder / f"{name}.pcap"
        self.log: RPath = folder / f"{name}.log"
        self.process: Process | None = None

    def begin(self) -> None:
        from quicbed.traces.capture import client_interface, start_tcpdump

        self.abort()
        tb = self.tb
        tb.mkdir("client", self.pcap.parent)
        tb.remove("client", self.pcap)
        argv = [
            "tcpdump",
            "-i",
            client_interface(tb),
            "-w",
            str(self.pcap),
            "-s",
            str(SNAPLEN),
            "-c",
            "1000",
            "-U",
            "--immediate-mode",
            "-n",
            "-Z",
            "root",
            f"tcp port {self.port} and host {tb.server_ip} and tcp[tcpflags] & tcp-syn != 0",
        ]
        self.process, _ = start_tcpdump(tb, "client", argv, self.log)

    def end(self) -> dict[str, Any]:
        """Stop the capture; its SYNs as facts (``tcp_syn``) or why there are none."""
        from quicbed.traces.capture import stop_tcpdump

        if self.process is None:
            return {"tcp_syn_problem": "no SYN capture ran for this load"}
        stop_tcpdump(self.process)
        self.process = None
        try:
            syns = read_pcap(self.tb.read_bytes("client", self.pcap))
        except (OSError, QuicbedError) as exc:
            return {"tcp_syn_problem": f"the SYN capture could not be read: {exc}"}
        return {"tcp_syn": [asdict(s) for s in syns]}

    def abort(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=5)
            self.process = None
