"""Arms: a named (protocol, server stack, congestion control, its parameters).

A cell compares arms. ``h2`` (Apache over TCP+TLS), ``h3`` (quic-go), ``h3-quiche``
(Cloudflare quiche) and ``h3-gquiche`` (Google QUICHE's quic_server, on the testbed)
are built in; a spec or the CLI may define more, e.g. ``h3-n2`` = quic-go with CUBIC
emulating two connections. What an arm may ask for is its stack's to say
(quicbed.servers: one module per stack), so a CC or a parameter a stack lacks is
refused by name before anything starts, never silently ignored.

The TCP arms' congestion control is the server and client namespaces' sysctl, one
per host: a cell's TCP arms must agree on it (``CellConfig.tcp_cc``).

The browser a page cell loads an arm in is settled here too (``resolve``), in one
place: the arm's own ``browser``, else the cell's, else the one the arm's stacks need
(Chromium 72 for gQUIC), else Chromium; and the browser must be able to do what the
arm's stack asks of it (its protocol, its evidence). Arms in different browsers are
compared only as named pairs: by default every arm is compared with the reference of
its own browser (``pairs``), so the browser is never a silent confound.

The stacks, browsers and shapers (quicbed.servers, quicbed.client, quicbed.shapers)
are imported inside the functions that ask them: the results folder's readers and
``quicbed verify`` load this module and must not load the runner (tests/test_layering.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    create_model,
    model_serializer,
    model_validator,
)

from quicbed.client import get_browser
from quicbed.client.browser import DEFAULT
from quicbed.client.transfer import TRANSFER_CLIENTS
from quicbed.errors import QuicbedError, from_validation
from quicbed.servers import get_stack, stacks
from quicbed.servers.webserver import Arm, Kind, WebServer
from quicbed.settings import keyexchange, sockopts, tparams

#: arm settings that every stored cell and spec writes, set or not (format 1); every
#: other parameter is left out of a dump while unset, so cells that do not use it keep
#: their IDs and digests
_FORMAT_1 = ("cubic_n", "cubic_beta")
_OWN = ("stack", "cc", "browser")
#: QUIC arms of one cell listen on these UDP ports, in arm order (one socket per port)
QUIC_PORTS = (443, 4433, 4434, 4435, 4436, 4437)
TCP_PORT = 443


# The stacks are asked through their registry, which imports their modules on its first
# call: reading a results folder (verify, the report) loads no server's module.
def builtin_arms() -> dict[str, str]:
    """Arm name -> stack, for arms a spec may name without saying their stack: each
    stack says which names mean it."""

    return {arm: cls.name for cls in stacks().values() for arm in cls.arms}


def arm_colour(name: str) -> str | None:
    """A built-in arm's colour in figures (its stack's); other arms take a cycle."""

    stack = builtin_arms().get(name)
    return get_stack(stack).colour if stack else None


@cache
def param_model() -> type[BaseModel]:
    """Every stack's parameters in one model, each typed as its stacks declare it: what
    a spec or ``--arms`` may set before the arm's own stack checks it (which stack an
    arm runs is only known once every setting is read)."""

    fields: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for cls in stacks().values():
        for key, info in cls.Params.model_fields.items():
            if key in fields and fields[key][0] != info.annotation:
                raise QuicbedError(
                    f"stacks {owner[key]} and {cls.name} type parameter {key} differently"
                )
            fields.setdefault(key, (info.annotation, None))
            owner.setdefault(key, cls.name)
    config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    return create_model("ArmParams", __config__=config, **fields)


def param_names() -> tuple[str, ...]:
    return tuple(param_model().model_fields)


class ArmSettings(BaseModel):
    """What a spec or the CLI may set for one arm: its stack, its CC, the browser its
    pages load in (a page cell's; unset: the cell's) and any stack's parameters (unset:
    the stack's own default). Values are typed here; whether the arm's stack and
    browser take them is ``resolve``'s check."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    stack: str | None = None
    cc: str | None = None
    browser: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _typed(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        given = {k: v for k, v in data.items() if k not in _OWN and v is not None}
        model = param_model()
        unknown = sorted(set(given) - set(model.model_fields))
        if unknown:
            raise ValueError(
                f"{unknown[0]} is no stack's parameter ({', '.join(_OWN)}, "
                f"{', '.join(param_names())})"
            )
        try:
            typed = model.model_validate(given).model_dump()
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"{where} {err['input']!r}: {err['msg']}") from None
        return {**{k: data[k] for k in _OWN if k in data}, **{k: typed[k] for k in given}}

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("browser") is None:  # written only when set: stored IDs stay
            out.pop("browser", None)
        return {**dict.fromkeys(_FORMAT_1), **out}

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


#: why a TLS 1.2 arm is not pinned (the 2017 replication's TCP arm)
TLS12_UNPINNED = (
    "quicbed pins and reads the key exchange of TLS 1.3 only (TLS 1.2 names its group in "
    "the ServerKeyExchange, which the hello capture does not read)"
)


def _pinned(arm: Arm, stack: type[WebServer], key_exchange: str) -> Arm:
    """``arm`` with the group its server pins: its own ``key_exchange``, else the cell's
    where its stack can pin one (a group the stack cannot pin is refused by name); a
    stack that pins no group, and a TLS 1.2 arm, keep their own choice (unpinned_arms
    names them)."""
    own = arm.params.get("key_exchange")
    if arm.params.get("tls") == "1.2":
        if own:
            raise QuicbedError(f"arm {arm.name}: key_exchange with tls 1.2: {TLS12_UNPINNED}")
        return arm
    if own:
        return replace(arm, key_exchange=None if own == keyexchange.STACK else own)
    if key_exchange == keyexchange.STACK or not stack.pins_key_exchange():
        return arm
    why = stack.key_exchange_refusals.get(key_exchange)
    if why:
        raise QuicbedError(
            f"key_exchange {key_exchange}: arm {arm.name}'s {stack.name} {why} (pin "
            f"another group, give the arm its own, or key_exchange: stack)"
        )
    return replace(arm, key_exchange=key_exchange)


def _with_aead(arm: Arm, stack: type[WebServer], aead: str | None) -> Arm:
    """``arm`` with the TLS 1.3 cipher suite its server pins: its own ``aead``, else the
    cell's where its stack can pin one (a suite the stack cannot pin is refused by name,
    quicbed.settings.sockopts); a stack that pins none, and a TLS 1.2 arm, keep their
    own choice (:func:`unpinned_aead` names them)."""
    if arm.params.get("tls") == "1.2":
        if arm.params.get("aead"):
            raise QuicbedError(
                f"arm {arm.name}: aead with tls 1.2: aead names a TLS 1.3 cipher suite"
            )
        return arm
    if aead is None or arm.params.get("aead") or "aead" not in stack.Params.model_fields:
        return arm
    try:
        params = stack.check_arm(arm.name, arm.cc, {**arm.params, "aead": aead})
    except QuicbedError as exc:
        raise QuicbedError(
            f"aead {aead} (the cell's): {exc} (give the arm its own aead, or leave the "
            "cell's unset)"
        ) from None
    return replace(arm, params=params)


def unpinned_aead(arms: Sequence[Arm], aead: str | None) -> dict[str, str]:
    """The arms a cell's ``aead`` cannot reach (their stacks pin no TLS 1.3 cipher suite,
    or they run TLS 1.2), each with why: they run their own choice, which the cell's
    summary names."""
    if aead is None:
        return {}

    def why(a: Arm) -> str:
        if a.params.get("tls") == "1.2":
            return "the arm runs TLS 1.2, and aead names a TLS 1.3 cipher suite"
        stack = get_stack(a.stack)
        return f"{stack.name} {stack.knob_refusals.get('aead', 'cannot pin a cipher suite')}"

    return {a.name: why(a) for a in arms if not a.params.get("aead")}


def unpinned_arms(arms: Sequence[Arm], key_exchange: str) -> dict[str, str]:
    """The arms a cell's key exchange cannot reach (their stacks pin no group), each with
    why: they run their own choice, which the cell's summary and report name."""
    if key_exchange == keyexchange.STACK:
        return {}

    def why(a: Arm) -> str:
        if a.params.get("tls") == "1.2":
            return TLS12_UNPINNED
        if a.params.get("key_exchange") == keyexchange.STACK:
            return "the arm sets key_exchange stack"
        return get_stack(a.stack).key_exchange_unpinned

    return {a.name: why(a) for a in arms if a.key_exchange is None}


def resolve(
    names: tuple[str, ...],
    settings: dict[str, ArmSettings],
    default_cc: str,
    kind: Kind = "page",
    browser: str | None = None,
    key_exchange: str = keyexchange.STACK,
    aead: str | None = None,
) -> list[Arm]:
    """The arms of a cell in order, each checked against its stack (what it takes and
    which cells it can be measured in) and, in a page cell, given its browser (``browser``:
    the cell's, None: the stacks' choice); every arm whose stack can pin a group runs the
    cell's ``key_exchange`` unless it names its own (:func:`_pinned`), and every arm
    whose stack can pin a TLS 1.3 cipher suite the cell's ``aead`` (:func:`_with_aead`);
    errors name the value."""

    extra = sorted(set(settings) - set(names))
    if extra:
        raise QuicbedError(
            f"settings for arm {extra[0]!r}, which is not one of the cell's "
            f"arms ({', '.join(names)})"
        )
    builtin = builtin_arms()
    out: list[Arm] = []
    quic_ports = iter(QUIC_PORTS)
    for name in names:
        s = settings.get(name, ArmSettings())
        stack_name = s.stack or builtin.get(name)
        if stack_name is None:
            raise QuicbedError(
                f"unknown arm {name!r} (built in: {', '.join(builtin)}; a new arm "
                f"names its stack, e.g. {name}:stack={next(iter(builtin.values()))})"
            )
        stack = get_stack(stack_name)
        cc = s.cc or default_cc
        params = stack.check_arm(name, cc, s.params())
        stack.check_kind(name, kind)
        if kind != "page":  # a page cell's client is its arm's browser, resolved below
            tparams.check_client(name, TRANSFER_CLIENTS[kind], params)
        sockopts.check_client(name, kind, params)  # which of its socket knobs it takes
        if stack.transport == "udp":
            port = next(quic_ports, None)
            if port is None:
                raise QuicbedError(f"at most {len(QUIC_PORTS)} QUIC arms per cell")
        else:
            port = TCP_PORT
        out.append(Arm(name, stack.name, stack.protocol, stack.transport, cc, params, port))
    stacks_of = {a.name: get_stack(a.stack) for a in out}
    if kind == "page":
        out = _with_browsers(out, settings, stacks_of, browser)
        for a in out:  # what each arm's browser can advertise
            tparams.check_client(a.name, _browser_support(a.browser), a.params)
    else:
        given = [n for n in names if settings.get(n, ArmSettings()).browser]
        if given or browser:
            raise QuicbedError(
                f"{'arm ' + given[0] + ': ' if given else ''}browser is for page cells; "
                f"a {kind} cell's transfers run quicbed-bulk, not a browser"
            )
    tls = next((s.tcp_tls for s in stacks_of.values() if s.tcp_tls), None)
    if tls:
        out = [
            replace(a, params={**a.params, "tls": a.params.get("tls", tls)})
            if a.transport == "tcp"
            else a
            for a in out
        ]
    out = [_pinned(a, stacks_of[a.name], key_exchange) for a in out]
    out = [_with_aead(a, stacks_of[a.name], aead) for a in out]
    tcp = [a for a in out if a.transport == "tcp"]
    if len(tcp) > 1:
        raise QuicbedError(
            f"arms {', '.join(a.name for a in tcp)} all need TCP port 443 on the server; "
            "a cell has one TCP arm"
        )
    return out


def _browser_support(name: str | None) -> tparams.ClientSupport:
    """What a browser can be made to advertise (its own ``transport_support``)."""

    cls = get_browser(name or DEFAULT)
    return cls.transport_support or tparams.ClientSupport(cls.label or cls.name, (), {})


def _with_browsers(
    arms: list[Arm],
    settings: dict[str, ArmSettings],
    stacks_of: dict[str, type[WebServer]],
    browser: str | None,
) -> list[Arm]:
    """Each arm of a page cell with its browser: its own setting, else the cell's
    (``browser``), else the one its cell's stacks need, else the default; refused, by
    name, where the browser cannot do what the arm's stack asks of it."""

    named = {a.name: b for a in arms if (b := settings.get(a.name, ArmSettings()).browser)}
    # one browser per cell unless the spec names them: the one an arm's stack needs
    need = sorted({s.client for s in stacks_of.values() if s.client != WebServer.client})
    names = ", ".join(a.name for a in arms)
    if len(need) > 1 and not named:
        raise QuicbedError(
            f"arms {names} need different browsers ({', '.join(need)}); "
            "one cell runs in one browser"
        )
    if len(need) == 1 and browser is None and not named:
        odd = [a.name for a in arms if a.transport == "udp" and stacks_of[a.name].client != need[0]]
        if odd:
            raise QuicbedError(
                f"arm(s) {', '.join(odd)} cannot run in {need[0]}, the browser of this cell's "
                f"{', '.join(a.name for a in arms if stacks_of[a.name].client == need[0])} arm: "
                "compare them in cells of their own"
            )
    cell = browser or (need[0] if len(need) == 1 else DEFAULT)
    out = []
    for a in arms:
        b = named.get(a.name, cell)
        try:
            cls = get_browser(b)
        except QuicbedError as exc:
            raise QuicbedError(f"arm {a.name}: {exc}") from None
        stack = stacks_of[a.name]
        if stack.client != WebServer.client and b != stack.client:
            raise QuicbedError(
                f"arm {a.name}: {stack.name}'s pages load only in browser {stack.client} "
                f"({get_browser(stack.client).label}), not {b}"
            )
        if a.protocol not in cls.protocols:
            raise QuicbedError(
                f"arm {a.name}: browser {b} cannot speak {a.protocol} "
                f"(it speaks {', '.join(cls.protocols)})"
            )
        refusal = stack.browser_refusal(a, b, cls.net_log)
        if refusal:
            raise QuicbedError(f"arm {a.name}: {refusal}")
        out.append(replace(a, browser=b))
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
            if not eq or key not in (*_OWN, *param_names()):
                raise QuicbedError(
                    f"--arms: {item!r}: {p!r} is not KEY=VALUE with KEY one of "
                    f"{', '.join(_OWN)}, {', '.join(param_names())}"
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
    """Which arms are compared: every arm against the reference of its browser (the TCP
    arm, else the first arm loaded in the same browser), then the named pairs: arms in
    two browsers are compared only when a pair names them. A pair is (reference,
    candidate); the difference (mean reference - mean candidate) / mean candidate is
    positive when the candidate is faster. ``arms`` may be stored records
    (``Arm.as_dict``): a transfer cell's record is compared as its page cell would be."""
    named = [
        (a["name"], a["transport"], a.get("browser"))
        if isinstance(a, Mapping)
        else (a.name, a.transport, a.browser)
        for a in arms
    ]
    names = [n for n, _, _ in named]
    if len(names) < 2:
        return []
    out = []
    for browser in dict.fromkeys(b for _, _, b in named):
        group = [(n, t) for n, t, b in named if b == browser]
        ref = next((n for n, t in group if t == "tcp"), group[0][0])
        out += [(ref, n) for n, _ in group if n != ref]
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
