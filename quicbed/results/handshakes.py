"""The ``handshakes`` table of ``quicbed export``: one row per connection of every load,
what its hellos showed and, at ``--traces full``, what its whole handshake cost.

Two sources, joined by the connection's client port: the load's hello capture of an
arm that pins a key exchange (the server facts' ``tls_hellos``, quicbed.traces.hellos:
every traces level), and the level-full capture read with tshark and the key log (the
run's ``detail["handshake"]``, quicbed.traces.handshake). ``source`` says which gave the
row: ``hellos``, ``capture`` or ``both``; a column its source cannot give is empty.
``certificate`` is the chain the cell's servers sent (quicbed.settings.certificate), which
a row's ``certificates`` and ``certificate_bytes`` count on the wire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.settings.certificate import DEFAULT as DEFAULT_CHAIN

#: the load's columns, then the connection's (quicbed.traces.hellos.Hello and
#: quicbed.traces.handshake.Handshake name them alike)
LOAD = [
    "cell_id",
    "attempt",
    "arm",
    "rep",
    "warmup",
    "valid",
    "key_exchange",
    "certificate",
    "source",
]
HELLO = [
    "transport",
    "client_port",
    "offered",
    "group",
    "group_name",
    "hello_retry",
    "cipher",
    "resumed",
    "client_hello_bytes",
]
CAPTURE = [
    "server_port",
    "certificates",
    "certificate_bytes",
    "signature_algorithm",
    "server_flight_bytes",
    "span_ms",
    "round_trips",
    "client_first_bytes",
    "server_flight_udp_bytes",
    "amplification_held",
]
COLUMNS = [*LOAD, *HELLO, *CAPTURE]


def load_groups(detail: dict[str, Any]) -> list[str]:
    """The key-exchange groups a load's ServerHellos chose: from its hello capture (an arm
    that pins one, quicbed.settings.keyexchange), else its level-full capture
    (quicbed.traces.handshake); none where neither was taken."""
    hellos = (detail.get("server") or {}).get("tls_hellos")
    if hellos is not None:
        return sorted({h["group_name"] for h in hellos if h.get("group_name")})
    return list((detail.get("handshake") or {}).get("groups") or [])


def arm_groups(runs: list[RunRow], arm: str) -> str:
    """The groups an arm's measured loads ran, comma-separated ("" where none was read):
    what the report names beside each arm, so a comparison of two key exchanges shows."""
    found = {g for r in runs if r.arm == arm and not r.warmup for g in load_groups(r.detail)}
    return ",".join(sorted(found))


def _cell(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return v


def rows(root: Path) -> list[dict[str, Any]]:
    store = Store(root)
    try:
        out = []
        for cid in store.cells():
            cfg = store.cell_config(cid)
            pins = _pins(cfg)
            chain = cfg.get("certificate", DEFAULT_CHAIN)
            for a in store.attempts(cid):
                for r in store.runs(cid, a.attempt):
                    load = {"cell_id": cid, "attempt": a.attempt, "arm": r.arm, "rep": r.rep}
                    load |= {"warmup": int(r.warmup), "valid": int(r.valid)}
                    load["key_exchange"] = pins.get(r.arm)
                    load["certificate"] = chain
                    out += _load_rows(r.detail or {}, load)
        return out
    finally:
        store.close()


def _pins(cfg: dict[str, Any]) -> dict[str, str | None]:
    """Each arm's pinned group, as the cell's configuration resolves it (none where it
    no longer resolves: a stack gone from this quicbed)."""
    from quicbed.errors import QuicbedError
    from quicbed.spec.cellconfig import CellConfig

    try:
        return {a.name: a.key_exchange for a in CellConfig.model_validate(cfg).resolved_arms()}
    except (QuicbedError, ValueError):
        return {}


def _load_rows(detail: dict[str, Any], load: dict[str, Any]) -> list[dict[str, Any]]:
    hellos = {h["client_port"]: h for h in (detail.get("server") or {}).get("tls_hellos") or []}
    captured = {h["client_port"]: h for h in (detail.get("handshake") or {}).get("all") or []}
    out = []
    for port in dict.fromkeys([*captured, *hellos]):  # the capture's order first
        h, c = hellos.get(port) or {}, captured.get(port) or {}
        source = "both" if h and c else "hellos" if h else "capture"
        row: dict[str, Any] = {**load, "source": source}
        for key in HELLO:  # the capture's reading where both have it (decrypted, tshark)
            v = c.get("offered_key_shares" if key == "offered" else key)
            row[key] = _cell(v if v is not None else h.get(key))
        row["cipher"] = c.get("cipher_name") or h.get("cipher")
        for key in CAPTURE:
            row[key] = _cell(c.get(key))
        out.append(row)
    return out
