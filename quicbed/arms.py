"""Arms: a named (protocol, server stack, congestion control, its parameters).

A cell compares arms. ``h2`` (Apache over TCP+TLS), ``h3`` (quic-go), ``h3-quiche``
(Cloudflare quiche) and ``h3-gquiche`` (Google QUICHE's quic_server, on the testbed)
are built in; a spec or the CLI may define more, e.g. ``h3-n2`` = quic-go with CUBIC
emulating two connections. What an arm may ask for is its stack's to say
(quicbed.servers: one module per stack), so a CC or a parameter a stack lacks is
refused by name before anything starts, never silently ignored.

The TCP arms' congestion control is the server and client namespaces' sysctl, one
per host: a cell's TCP arms must agree on it (``CellConfig.tcp_cc``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer

from quicbed.errors import QuicbedError, from_validation

#: the built-in arms and their stacks (quicbed.servers registry names)
BUILTIN_ARMS = {
    "h2": "apache",
    "h3": "quic-go",
    "h3-quiche": "quiche",
    "h3-gquiche": "gquiche",
    "gquic": "gquic",
}
#: parameters an arm may set besides its stack and CC; a stack lists which it takes
#: (the TCP options, tcp_sack ... rmem, are a TCP arm's: quicbed.tcpopts)
TCP_OPTIONS = ("tcp_sack", "tcp_ecn", "tcp_window_scaling", "tcp_fastopen", "initcwnd", "rmem")
PARAMS = ("cubic_n", "cubic_beta", "quic_version", "tls", *TCP_OPTIONS)
#: settings added after cells were first stored: left out of a dump while unset, so
#: cells and specs that do not use them keep their IDs and digests
_LATER = ("quic_version", "tls", *TCP_OPTIONS)
#: QUIC arms of one cell listen on these UDP ports, in arm order (one socket per port)
QUIC_PORTS = (443, 4433, 4434, 4435, 4436, 4437)
TCP_PORT = 443


class ArmSettings(BaseModel):
    """What a spec or the CLI may set for one arm (unset: the stack's own default)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    stack: str | None = None
    cc: str | None = None
    cubic_n: int | None = Field(default=None, description="CUBIC's emulated connections N")
    cubic_beta: float | None = Field(default=None, description="CUBIC's loss backoff beta")
    quic_version: str | None = Field(default=None, description="gQUIC version, e.g. Q039")
    tls: str | None = Field(default=None, description="TLS version of a TCP arm: 1.2 or 1.3")
    # TCP options of a TCP arm, on both ends (quicbed.tcpopts); unset: the host's default
    tcp_sack: bool | None = Field(default=None, description="net.ipv4.tcp_sack")
    tcp_ecn: int | None = Field(default=None, description="net.ipv4.tcp_ecn: 0, 1 or 2")
    tcp_window_scaling: bool | None = Field(default=None, description="net.ipv4.tcp_window_scaling")
    tcp_fastopen: int | None = Field(default=None, description="net.ipv4.tcp_fastopen (bits)")
    initcwnd: int | None = Field(default=None, description="initial window (route), segments")
    rmem: str | None = Field(default=None, description="receive-buffer preset, e.g. ws2")

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in _LATER:
            if out.get(key) is None:
                out.pop(key, None)
        return out

    def params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PARAMS if getattr(self, k) is not None}


@dataclass(frozen=True)
class Arm:
    """One arm of one cell, resolved: every knob named, where it listens."""

    name: str
    stack: str
    protocol: str  # what the browser must see: h2 or h3
    transport: str  # tcp or udp
    cc: str
    params: dict[str, Any] = field(default_factory=dict)
    port: int = 443

    def describe(self) -> str:
        extra = "".join(
            f", {k} {str(v).lower()}"
            if isinstance(v, bool)
            else f", {k} {v:g}"
            if isinstance(v, float | int)
            else f", {k} {v}"
            for k, v in self.params.items()
        )
        return f"{self.name} ({self.stack}, {self.cc}{extra})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stack": self.stack,
            "protocol": self.protocol,
            "transport": self.transport,
            "cc": self.cc,
            "params": self.params,
            "port": self.port,
        }


def check_settings(name: str, s: ArmSettings) -> None:
    """Bounds that hold for every stack (a stack's own limits are its check's)."""
    if s.cubic_n is not None and s.cubic_n < 1:
        raise QuicbedError(f"arm {name}: cubic_n must be >= 1 (got {s.cubic_n})")
    if s.cubic_beta is not None and not 0 < s.cubic_beta < 1:
        raise QuicbedError(f"arm {name}: cubic_beta must be in (0, 1) (got {s.cubic_beta:g})")


def resolve(names: tuple[str, ...], settings: dict[str, ArmSettings], default_cc: str) -> list[Arm]:
    """The arms of a cell in order, each checked against its stack; errors name the value."""
    from quicbed.servers import get_stack

    extra = sorted(set(settings) - set(names))
    if extra:
        raise QuicbedError(
            f"settings for arm {extra[0]!r}, which is not one of the cell's "
            f"arms ({', '.join(names)})"
        )
    out: list[Arm] = []
    quic_ports = iter(QUIC_PORTS)
    for name in names:
        s = settings.get(name, ArmSettings())
        check_settings(name, s)
        stack_name = s.stack or BUILTIN_ARMS.get(name)
        if stack_name is None:
            raise QuicbedError(
                f"unknown arm {name!r} (built in: {', '.join(BUILTIN_ARMS)}; a new arm "
                f"names its stack, e.g. {name}:stack=quic-go)"
            )
        stack = get_stack(stack_name)
        cc = s.cc or default_cc
        stack.check_arm(name, cc, s.params())
        if stack.transport == "udp":
            port = next(quic_ports, None)
            if port is None:
                raise QuicbedError(f"at most {len(QUIC_PORTS)} QUIC arms per cell")
        else:
            port = TCP_PORT
        out.append(Arm(name, stack.name, stack.protocol, stack.transport, cc, s.params(), port))
    tcp = [a for a in out if a.transport == "tcp"]
    stacks = {a.name: get_stack(a.stack) for a in out}
    # one browser per cell: the one an arm's stack needs (TCP arms run in any)
    need = sorted({s.client for s in stacks.values() if s.client != "chromium"})
    if len(need) > 1:
        raise QuicbedError(
            f"arms {', '.join(names)} need different browsers ({', '.join(need)}); "
            "one cell runs in one browser"
        )
    if need:
        odd = [a.name for a in out if a.transport == "udp" and stacks[a.name].client != need[0]]
        if odd:
            raise QuicbedError(
                f"arm(s) {', '.join(odd)} cannot run in {need[0]}, the browser of this cell's "
                f"{', '.join(a.name for a in out if stacks[a.name].client == need[0])} arm: "
                "compare them in cells of their own"
            )
    tls = next((s.tcp_tls for s in stacks.values() if s.tcp_tls), None)
    if tls:
        out = [
            replace(a, params={**a.params, "tls": a.params.get("tls", tls)})
            if a.transport == "tcp"
            else a
            for a in out
        ]
        tcp = [a for a in out if a.transport == "tcp"]
    tcp = [a for a in out if a.transport == "tcp"]
    if len(tcp) > 1:
        raise QuicbedError(
            f"arms {', '.join(a.name for a in tcp)} all need TCP port 443 on the server; "
            "a cell has one TCP arm"
        )
    return out


def parse_cli(text: str) -> tuple[tuple[str, ...], dict[str, ArmSettings]]:
    """``h2,h3:cc=cubic,h3-n2:stack=quic-go:cubic_n=2`` -> names and settings."""
    names: list[str] = []
    settings: dict[str, ArmSettings] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, *pairs = item.split(":")
        name = name.strip()
        if not name:
            raise QuicbedError(f"--arms: an arm without a name in {item!r}")
        kv: dict[str, Any] = {}
        for p in pairs:
            key, eq, value = p.partition("=")
            key = key.strip()
            if not eq or key not in ("stack", "cc", *PARAMS):
                raise QuicbedError(
                    f"--arms: {item!r}: {p!r} is not KEY=VALUE with KEY one of "
                    f"stack, cc, {', '.join(PARAMS)}"
                )
            kv[key] = value.strip()
        if kv:
            try:
                settings[name] = ArmSettings(**kv)
            except ValidationError as exc:
                raise from_validation(exc, f"--arms {name}") from None
        names.append(name)
    return tuple(names), settings


def pairs(
    arms: Sequence[Arm] | Sequence[Mapping[str, Any]], extra: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """Which arms are compared: every arm against the reference (the TCP arm, else the
    first arm), then the named pairs. A pair is (reference, candidate); the difference
    (mean reference - mean candidate) / mean candidate is positive when the candidate
    is faster. ``arms`` may be stored records (``Arm.as_dict``): a transfer cell's
    record is compared as its page cell would be."""
    named = [
        (a.name, a.transport) if isinstance(a, Arm) else (a["name"], a["transport"]) for a in arms
    ]
    names = [n for n, _ in named]
    if len(names) < 2:
        return []
    ref = next((n for n, t in named if t == "tcp"), names[0])
    out = [(ref, n) for n in names if n != ref]
    for a, b in extra or []:
        for n in (a, b):
            if n not in names:
                raise QuicbedError(
                    f"pair {a}/{b}: {n!r} is not an arm of the cell ({', '.join(names)})"
                )
        if a == b:
            raise QuicbedError(f"pair {a}/{b} compares an arm with itself")
        if (a, b) not in out and (b, a) not in out:
            out.append((a, b))
    return out


def own_pairs(extra: list[tuple[str, str]] | None, arms: Iterable[str]) -> list[tuple[str, str]]:
    """A sweep's pairs that name two of this cell's arms: a spec's ``statistics.pairs``
    may name arms that only some of its cells have (the rest are other cells' pairs)."""
    names = set(arms)
    return [p for p in extra or [] if set(p) <= names]


def parse_pairs(text: str | list[str] | None) -> list[tuple[str, str]]:
    """``h3/h3-quiche,h3/h3-n2`` (or a list of such) -> pairs."""
    items = text.split(",") if isinstance(text, str) else list(text or [])
    out = []
    for item in (x.strip() for x in items):
        if not item:
            continue
        a, slash, b = item.partition("/")
        if not slash or not a.strip() or not b.strip():
            raise QuicbedError(f"pair {item!r} is not ARM/ARM (e.g. h3/h3-quiche)")
        out.append((a.strip(), b.strip()))
    return out
