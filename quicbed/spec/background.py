"""Background flows of a page cell: traffic that shares the bottleneck with every load.

A page cell's loads have the link to themselves unless the cell names background
flows; then each flow starts before the first load and runs through every load of
every arm (quicbed.run.background), and every load stores each flow's goodput and
share of the link over that load. The flows are part of the cell's identity.

One spelling, in the CLI's ``--background`` and a spec's ``background`` (a list of
these strings, or of mappings with the same keys)::

    KIND:TRANSPORT:CC[:size=SIZE][:every=SECONDS][:direction=down|up]

- ``bulk``: one object (``size``, default 10MB) requested back to back on one
  connection, for as long as the cell runs (a download beside the page);
- ``chunks``: one object of ``size`` every ``every`` seconds (both required), as a
  video player fetches its segments: on while a chunk downloads, off until the next;
- ``tcp``: HTTP/2 over TCP+TLS 1.3 with the kernel congestion control ``CC`` set on
  the background server's own socket, whatever the page arms' TCP runs (cubic, bbr,
  reno); ``quic``: HTTP/3 on quic-go with its ``CC`` (cubic, reno).

A flow is a download (``direction=down``, the default: the server sends, its CC is
the server's) or an upload (``direction=up``: the client POSTs the objects, its CC is
the client's, and its ACKs share the page's downlink). Each runs quicbed-h3server and
quicbed-bulk, the bulk cells' programs. E.g. ``bulk:tcp:cubic``,
``bulk:tcp:bbr,chunks:quic:cubic:size=1MB:every=2,bulk:tcp:cubic:direction=up``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from quicbed.errors import QuicbedError, from_validation
from quicbed.servers import get_stack, tcp_ccs
from quicbed.spec.bulkobjects import parse_size

#: the ports of the flows' servers, one per flow (TCP or UDP by the flow's transport):
#: apart from the arms' (443 and quicbed.spec.arms.QUIC_PORTS), and left out of a load's
#: capture (quicbed.traces.capture), which is of the page's packets
PORTS = (9443, 9444, 9445, 9446)
#: a bound on typos, and one port each
MAX_FLOWS = len(PORTS)
#: a bulk flow's object when the spelling names none (decimal: 10^7 bytes): large
#: enough that the gap between two requests on the connection is a small part of it
BULK_SIZE = "10MB"
#: seconds between two chunks, at most (a longer gap is no background traffic)
MAX_EVERY_S = 60.0
KINDS = ("bulk", "chunks")
TRANSPORTS = ("tcp", "quic")
DIRECTIONS = ("down", "up")


def _quic_ccs() -> tuple[str, ...]:
    """quic-go's, which serves every background QUIC flow."""

    return tuple(get_stack("quic-go").ccs)


class BackgroundFlow(BaseModel):
    """One background flow, as the cell stores it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: Literal["bulk", "chunks"]
    transport: Literal["tcp", "quic"]
    cc: str
    #: the object each request fetches (quicbed.spec.bulkobjects: 500KB, 10MB, ...)
    size: str = BULK_SIZE
    #: chunks: seconds from one request's start to the next's; None for bulk
    every_s: float | None = Field(default=None, gt=0, le=MAX_EVERY_S)
    #: down: the server sends (a download); up: the client sends (an upload)
    direction: Literal["down", "up"] = "down"

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A download's dump has no direction: cells stored before uploads existed keep
        their IDs."""
        out: dict[str, Any] = handler(self)
        if out.get("direction") == "down":
            out.pop("direction")
        return out

    @model_validator(mode="after")
    def _check(self) -> BackgroundFlow:
        try:
            parse_size(self.size)
        except QuicbedError as exc:
            raise ValueError(str(exc)) from None
        ccs = tcp_ccs() if self.transport == "tcp" else _quic_ccs()
        if self.cc not in ccs:
            who = "the kernel's TCP" if self.transport == "tcp" else "quic-go"
            raise ValueError(
                f"cc {self.cc!r} for a {self.transport} flow: {who} has {', '.join(ccs)}"
            )
        if self.kind == "chunks" and self.every_s is None:
            raise ValueError("a chunks flow needs every=SECONDS (one chunk per interval)")
        if self.kind == "bulk" and self.every_s is not None:
            raise ValueError("every is for chunks flows; a bulk flow fetches back to back")
        return self

    def label(self) -> str:
        """How reports and progress name the flow: ``bulk tcp bbr``, ``chunks quic
        cubic 1MB/2s``."""
        base = f"{self.kind} {self.transport} {self.cc}"
        if self.kind == "chunks":
            base = f"{base} {self.size}/{self.every_s:g}s"
        elif self.size != BULK_SIZE:
            base = f"{base} {self.size}"
        return f"{base} up" if self.direction == "up" else base

    def text(self) -> str:
        """The flow in the spelling it is read from (parse_background(text) == (self,))."""
        out = f"{self.kind}:{self.transport}:{self.cc}"
        if self.size != BULK_SIZE or self.kind == "chunks":
            out += f":size={self.size}"
        if self.every_s is not None:
            out += f":every={self.every_s:g}"
        if self.direction == "up":
            out += ":direction=up"
        return out


def _one(part: str) -> dict[str, Any]:
    """``bulk:tcp:cubic:size=1MB`` as the model's fields."""
    fields = [f.strip() for f in part.split(":")]
    if len(fields) < 3 or not all(fields[:3]):
        raise QuicbedError(
            f"{part!r} is not KIND:TRANSPORT:CC[:size=SIZE][:every=SECONDS] "
            "(e.g. bulk:tcp:cubic, chunks:quic:cubic:size=1MB:every=2)"
        )
    kind, transport, cc = fields[:3]
    if kind not in KINDS:
        raise QuicbedError(f"{part!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if transport not in TRANSPORTS:
        raise QuicbedError(
            f"{part!r}: transport {transport!r} is not one of {', '.join(TRANSPORTS)}"
        )
    out: dict[str, Any] = {"kind": kind, "transport": transport, "cc": cc}
    for opt in fields[3:]:
        key, eq, value = opt.partition("=")
        if not eq or not value:
            raise QuicbedError(f"{part!r}: {opt!r} is not KEY=VALUE")
        if key == "size":
            out["size"] = value
        elif key == "every":
            try:
                out["every_s"] = float(value.removesuffix("s"))
            except ValueError:
                raise QuicbedError(
                    f"{part!r}: every {value!r} is not a number of seconds"
                ) from None
            if not 0 < out["every_s"] <= MAX_EVERY_S:
                raise QuicbedError(
                    f"{part!r}: every {value}: seconds between chunks, > 0 and at most "
                    f"{MAX_EVERY_S:g}"
                )
        elif key == "direction":
            if value not in DIRECTIONS:
                raise QuicbedError(
                    f"{part!r}: direction {value!r} is not down (the server sends) or up "
                    "(the client sends)"
                )
            out["direction"] = value
        else:
            raise QuicbedError(f"{part!r}: unknown setting {key!r} (size, every, direction)")
    return out


def parse_background(value: object) -> tuple[BackgroundFlow, ...]:
    """The flows of ``--background`` (comma-separated), or of a spec's list of strings
    or mappings; errors name the flow and the value (the caller says "background")."""
    if value is None or value == "" or value == "none":
        return ()
    if isinstance(value, str):
        items: Iterable[Any] = [p for p in value.split(",") if p.strip()]
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise QuicbedError(f"a list of flows or a string (got {value!r})")
    flows = []
    for item in items:
        if isinstance(item, BackgroundFlow):
            flows.append(item)
            continue
        fields = _one(item.strip()) if isinstance(item, str) else item
        if not isinstance(fields, dict):
            raise QuicbedError(f"{item!r} is not a flow")
        try:
            flows.append(BackgroundFlow.model_validate(fields))
        except ValidationError as exc:
            raise from_validation(exc, str(item)) from None
    if len(flows) > MAX_FLOWS:
        raise QuicbedError(f"at most {MAX_FLOWS} flows per cell (got {len(flows)})")
    return tuple(flows)


def background_text(flows: Iterable[BackgroundFlow]) -> str:
    """The flows as ``--background`` takes them (``none`` for no flow)."""
    return ",".join(f.text() for f in flows) or "none"
