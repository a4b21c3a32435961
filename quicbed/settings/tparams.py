"""QUIC transport parameters (RFC 9000, section 18.2) as arm settings, on both ends.

An arm of a QUIC stack may set the parameters its **server** advertises, by RFC 9000's
names and in its units (bytes, milliseconds, counts): ``initial_max_data``, the three
``initial_max_stream_data_*`` limits, ``initial_max_streams_bidi`` and ``_uni``,
``max_idle_timeout``, ``max_udp_payload_size``, ``max_ack_delay``,
``ack_delay_exponent``, ``active_connection_id_limit``, and ``flow_control_autotune``
(not a parameter: whether the stack grows its receive windows beyond the advertised
initial values as the application reads, as quic-go and quiche do; false keeps them at
the initial values). The same keys with ``client_`` (``client_initial_max_data``) set
what the arm's **client** advertises: the transfer client of bulk and compete cells
(quicbed-bulk, quic-go's client) and, for page cells, the browser where a documented
switch sets one (each declares what it takes: quicbed.client.transfer and the
browsers' ``transport_support``). Unset: the stack's or client's own default, and left
out of the cell's ID (every stored cell keeps its ID).

Here: the RFC's ranges (:data:`PARAMS`, checked for every stack), :class:`TransportParams`
(the fields every QUIC stack's ``Params`` takes, so the one parameter model across
stacks types them alike), what each client can set, and the evidence. Each stack says
what it cannot set, with its reason, in its own module (``refuse``); a value outside a
stack's own limits is its own check too.

**Verified from the wire**, per load and per flow: the server logs, per connection, the
parameters each side advertised as its QUIC stack recorded them (quic-go and quiche:
the qlog event ``transport:parameters_set``, initiator ``local`` for its own and
``remote`` for the client's, decoded from the client's handshake; Envoy: the client's
NetLog, which shows what Envoy sent). :func:`evidence` compares every set key with what
every connection of the load advertised: a parameter absent from the event has its RFC
default (quic-go leaves out a limit of 0). A load or flow that differs is invalid, with
a reason naming the parameter. Both ends' sets are stored with every load
(``tp_local``: the server's, ``tp_remote``: the client's), so what a browser advertised
is a fact of every page load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from quicbed.errors import QuicbedError

#: the largest variable-length integer (RFC 9000, section 16)
VARINT_MAX = 2**62 - 1
#: what a client's key starts with
CLIENT = "client_"
#: not a transport parameter: whether receive windows grow beyond the advertised ones
AUTOTUNE = "flow_control_autotune"


@dataclass(frozen=True)
class Param:
    """One transport parameter: its unit, RFC 9000's range and its default when absent."""

    unit: str
    lo: int
    hi: int
    default: int
    what: str


#: RFC 9000, section 18.2: name -> unit, range, default (absent from the handshake)
PARAMS: dict[str, Param] = {
    "initial_max_data": Param("bytes", 0, VARINT_MAX, 0, "connection flow-control limit"),
    "initial_max_stream_data_bidi_local": Param(
        "bytes", 0, VARINT_MAX, 0, "limit for bidirectional streams the endpoint opens"
    ),
    "initial_max_stream_data_bidi_remote": Param(
        "bytes", 0, VARINT_MAX, 0, "limit for bidirectional streams the peer opens"
    ),
    "initial_max_stream_data_uni": Param(
        "bytes", 0, VARINT_MAX, 0, "limit for unidirectional streams the peer opens"
    ),
    "initial_max_streams_bidi": Param(
        "count", 0, 2**60, 0, "bidirectional streams the peer may open"
    ),
    "initial_max_streams_uni": Param(
        "count", 0, 2**60, 0, "unidirectional streams the peer may open"
    ),
    "max_idle_timeout": Param("ms", 0, VARINT_MAX, 0, "idle timeout (0: none)"),
    "max_udp_payload_size": Param("bytes", 1200, 65527, 65527, "largest UDP payload received"),
    "max_ack_delay": Param("ms", 0, 2**14 - 1, 25, "longest the endpoint delays an ACK"),
    "ack_delay_exponent": Param("exponent", 0, 20, 3, "scale of the ACK Delay field"),
    "active_connection_id_limit": Param(
        "count", 2, VARINT_MAX, 2, "connection IDs the endpoint keeps"
    ),
}
#: the three stream-data limits, which quic-go and Envoy set with one window
STREAM_DATA = (
    "initial_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote",
    "initial_max_stream_data_uni",
)
#: every server key, then every client key
SERVER_KEYS = (*PARAMS, AUTOTUNE)
CLIENT_KEYS = tuple(CLIENT + k for k in SERVER_KEYS)
KEYS = (*SERVER_KEYS, *CLIENT_KEYS)


def is_key(key: str) -> bool:
    """A transport-parameter key, either end's."""
    return key in KEYS


def base(key: str) -> str:
    """The RFC name of a key, ``client_`` removed."""
    return key.removeprefix(CLIENT)


def fmt(key: str, v: Any) -> str:
    """A value as a person reads it: ``65536 bytes``, ``30000 ms``, ``true``."""
    if isinstance(v, bool) or base(key) == AUTOTUNE:
        return str(bool(v)).lower()
    p = PARAMS[base(key)]
    return f"{v} {p.unit}" if p.unit in ("bytes", "ms") else str(v)


def check_range(key: str, v: Any) -> None:
    """RFC 9000's range of ``key``; ValueError naming the value."""
    if v is None or base(key) == AUTOTUNE:
        return
    p = PARAMS[base(key)]
    if not p.lo <= v <= p.hi:
        raise ValueError(
            f"{key} {v}: RFC 9000 allows {p.lo}..{p.hi} ({p.unit}; {p.what})"
            if p.hi < VARINT_MAX
            else f"{key} {v}: RFC 9000 allows {p.lo}..2^62-1 ({p.unit}; {p.what})"
        )


class TransportParams(BaseModel):
    """The fields of every QUIC stack's ``Params`` (a base of it, beside
    quicbed.servers.webserver.Params): both ends' keys, RFC 9000's ranges checked. Which of
    them a stack can set is its own ``refuse``; which a client can, :func:`check_client`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    initial_max_data: int | None = Field(default=None, description="bytes")
    initial_max_stream_data_bidi_local: int | None = Field(default=None, description="bytes")
    initial_max_stream_data_bidi_remote: int | None = Field(default=None, description="bytes")
    initial_max_stream_data_uni: int | None = Field(default=None, description="bytes")
    initial_max_streams_bidi: int | None = Field(default=None, description="streams")
    initial_max_streams_uni: int | None = Field(default=None, description="streams")
    max_idle_timeout: int | None = Field(default=None, description="ms")
    max_udp_payload_size: int | None = Field(default=None, description="bytes")
    max_ack_delay: int | None = Field(default=None, description="ms")
    ack_delay_exponent: int | None = Field(default=None, description="exponent")
    active_connection_id_limit: int | None = Field(default=None, description="count")
    flow_control_autotune: bool | None = Field(
        default=None, description="grow receive windows beyond the initial ones"
    )
    client_initial_max_data: int | None = Field(default=None, description="bytes")
    client_initial_max_stream_data_bidi_local: int | None = Field(default=None, description="bytes")
    client_initial_max_stream_data_bidi_remote: int | None = Field(
        default=None, description="bytes"
    )
    client_initial_max_stream_data_uni: int | None = Field(default=None, description="bytes")
    client_initial_max_streams_bidi: int | None = Field(default=None, description="streams")
    client_initial_max_streams_uni: int | None = Field(default=None, description="streams")
    client_max_idle_timeout: int | None = Field(default=None, description="ms")
    client_max_udp_payload_size: int | None = Field(default=None, description="bytes")
    client_max_ack_delay: int | None = Field(default=None, description="ms")
    client_ack_delay_exponent: int | None = Field(default=None, description="exponent")
    client_active_connection_id_limit: int | None = Field(default=None, description="count")
    client_flow_control_autotune: bool | None = Field(
        default=None, description="the client grows its receive windows"
    )

    @field_validator(*(k for k in KEYS if base(k) != AUTOTUNE))
    @classmethod
    def _rfc_range(cls, v: int | None, info: ValidationInfo) -> int | None:
        check_range(str(info.field_name), v)
        return v


def set_keys(params: Mapping[str, Any]) -> list[str]:
    """The transport-parameter keys ``params`` sets, in :data:`KEYS` order."""
    return [k for k in KEYS if params.get(k) is not None]


def refuse(arm: str, who: str, params: Mapping[str, Any], why: Mapping[str, str]) -> None:
    """Refuse the first key of ``params`` that ``why`` has a reason for (``who`` cannot
    set it), naming the key, the value and the reason."""
    for key in set_keys(params):
        if key in why:
            raise QuicbedError(f"arm {arm}: {key} {params[key]}: {who} {why[key]}")


def one_stream_window(arm: str, who: str, params: Mapping[str, Any], prefix: str = "") -> None:
    """Refuse the three stream-data limits unless all are given, equal: ``who`` advertises
    one window for all three."""
    keys = [prefix + k for k in STREAM_DATA]
    given = {k: params[k] for k in keys if params.get(k) is not None}
    if given and (len(given) != 3 or len(set(given.values())) != 1):
        shown = ", ".join(f"{k}={v}" for k, v in given.items())
        raise QuicbedError(
            f"arm {arm}: {shown}: {who} advertises one stream window for all three "
            f"stream-data limits; give {', '.join(keys)}, equal"
        )


def check_server(arm: str, params: Mapping[str, Any]) -> None:
    """HTTP/3's own floor for what a server advertises: requests are bidirectional
    streams the client opens, and the client opens at least 3 unidirectional ones (its
    control and QPACK streams, RFC 9114 section 6.2)."""
    for key, floor in (("initial_max_streams_bidi", 1), ("initial_max_streams_uni", 3)):
        v = params.get(key)
        if v is not None and v < floor:
            raise QuicbedError(
                f"arm {arm}: {key} {v}: an HTTP/3 server must allow at least {floor} "
                "(requests are client bidirectional streams; the client opens 3 "
                "unidirectional ones, RFC 9114 section 6.2)"
            )


# --- the clients ---------------------------------------------------------------------
@dataclass(frozen=True)
class ClientSupport:
    """What the client of a kind of cell can advertise: ``sets`` names the keys it takes
    (without ``client_``), ``why`` the reason it cannot for each other key."""

    name: str
    sets: tuple[str, ...]
    why: Mapping[str, str]
    #: True: the client advertises one window for the three stream-data limits
    one_stream_window: bool = False
    #: keys whose 0 the client takes as "its default", so it cannot advertise 0
    zero_is_default: tuple[str, ...] = ()


#: every parameter a client could be asked to advertise
CLIENT_KEYS = (*PARAMS, AUTOTUNE)


def check_client(arm: str, client: ClientSupport, params: Mapping[str, Any]) -> None:
    """Refuse a client key ``client`` (a transfer cell's, quicbed.client.transfer; a page
    cell's browser's)
    cannot advertise, naming it."""
    for key in set_keys(params):
        if not key.startswith(CLIENT):
            continue
        name = base(key)
        if name not in client.sets:
            why = client.why.get(name, "cannot set it")
            raise QuicbedError(f"arm {arm}: {key} {params[key]}: {client.name} {why}")
    for name in client.zero_is_default:
        if params.get(CLIENT + name) == 0:
            raise QuicbedError(
                f"arm {arm}: {CLIENT}{name} 0: {client.name} takes 0 as its default "
                "and cannot advertise it"
            )
    if client.one_stream_window:
        one_stream_window(arm, client.name, params, CLIENT)
    uni = params.get(CLIENT + "initial_max_streams_uni")
    if uni is not None and uni < 3:
        raise QuicbedError(
            f"arm {arm}: {CLIENT}initial_max_streams_uni {uni}: HTTP/3 needs at least 3 "
            "(the server's control and QPACK streams, RFC 9114 section 6.2)"
        )


# --- the wire ------------------------------------------------------------------------
def wire_value(tp: Mapping[str, Any], name: str) -> int:
    """A parameter as one side advertised it (``tp``: its transport:parameters_set data):
    absent means RFC 9000's default."""
    v = tp.get(name)
    return PARAMS[name].default if v is None else int(v)


def advertised(sets: Iterable[Mapping[str, Any]], name: str) -> list[int]:
    """The distinct values of one parameter over a load's connections."""
    return sorted({wire_value(tp, name) for tp in sets})


def evidence(
    params: Mapping[str, Any], facts: Mapping[str, Any], where: str = "the server's log"
) -> list[str]:
    """Why a load's or flow's advertised parameters are not the arm's: every set key
    against every connection's set (``facts['tp_local']``: the server's, ``tp_remote``:
    the client's; ``flow_control_autotune`` and ``client_flow_control_autotune``: what
    the server and the client ran). One reason per parameter."""
    reasons = []
    for key in set_keys(params):
        want = params[key]
        side = "tp_remote" if key.startswith(CLIENT) else "tp_local"
        who = "the client" if key.startswith(CLIENT) else "the server"
        name = base(key)
        if name == AUTOTUNE:
            got = facts.get(key)
            if got != [bool(want)]:
                reasons.append(f"{key}: {where} shows {got}, not {fmt(key, want)}")
            continue
        sets = list(facts.get(side) or [])
        missing = sum(tp is None for tp in sets)
        if not sets or missing:
            of = f" on {missing} of {len(sets)} connection(s)" if sets else ""
            reasons.append(f"{key}: {where} has no record of what {who} advertised{of}")
            continue
        values = advertised(sets, name)
        if values != [want]:
            shown = ", ".join(fmt(key, v) for v in values)
            reasons.append(
                f"{key}: {who} advertised {shown} ({where}, transport:parameters_set), "
                f"not {fmt(key, want)}"
            )
    return reasons


def server_sees(params: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``params`` a server's record can show: every one but whether the
    client grew its windows."""
    return {k: v for k, v in params.items() if k != CLIENT + AUTOTUNE}


def client_view(params: Mapping[str, Any], final: Mapping[str, Any]) -> list[str]:
    """Why a transfer client's own record (quicbed-bulk's final record: ``tp_local`` is
    what it advertised, ``tp_remote`` what the server did) does not show the arm's
    transport parameters: the other end of the wire, checked beside the server's."""
    facts = {
        "tp_local": [final.get("tp_remote")],
        "tp_remote": [final.get("tp_local")],
        CLIENT + AUTOTUNE: [final[AUTOTUNE]] if final.get(AUTOTUNE) is not None else None,
    }
    want = {k: v for k, v in params.items() if k != AUTOTUNE}
    return evidence(want, facts, where="the client's record")


def conn_sets(conns: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A load's facts from its server's conn records (quicbed's own servers log
    ``tp_local``, ``tp_remote`` and ``flow_control_autotune`` per connection)."""
    conns = list(conns)
    out: dict[str, Any] = {
        "tp_local": [c.get("tp_local") for c in conns],
        "tp_remote": [c.get("tp_remote") for c in conns],
    }
    auto = {c["flow_control_autotune"] for c in conns if c.get(AUTOTUNE) is not None}
    if auto:
        out[AUTOTUNE] = sorted(auto)
    return out
