"""What each end advertised, from the store: the QUIC transport parameters of every load
and flow, both sides, and what each browser sent (issue 28, item 3).

Every QUIC page load stores the sets its server recorded per connection
(``detail.server.tp_local``: the server's, ``tp_remote``: the client's, as the server
decoded them; Envoy's arms from the client's NetLog), and every QUIC flow the same in
its evidence (quicbed.settings.tparams). :func:`rows` lays them out one row per connection
and side, a column per RFC 9000 parameter (a parameter the set leaves out has RFC
9000's default, as the handshake means it); :func:`by_client` is the report's table:
per client (the browser as it named itself, or the bulk client) and parameter, the
values it advertised and on how many connections. Computed whenever read, never stored.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.results.store import Store
from quicbed.settings import tparams

#: the bulk and compete flows' client (quicbed.run.bulk)
BULK_CLIENT = "quicbed-bulk (quic-go)"
COLUMNS = [
    "cell_id",
    "attempt",
    "kind",
    "arm",
    "stack",
    "rep",
    "warmup",
    "valid",
    "client",
    "side",
    "connection",
    *tparams.PARAMS,
]
SIDES = {"tp_local": "server", "tp_remote": "client"}


def _sets(facts: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for key, side in SIDES.items():
        for i, tp in enumerate(facts.get(key) or []):
            if isinstance(tp, dict):
                out.append((side, i, tp))
    return out


def _row(base: dict[str, Any], side: str, i: int, tp: dict[str, Any]) -> dict[str, Any]:
    return {
        **base,
        "side": side,
        "connection": i,
        **{k: tparams.wire_value(tp, k) for k in tparams.PARAMS},
    }


def _page_stacks(cfg: dict[str, Any]) -> dict[str, str]:
    """A page cell's arm -> stack, as its configuration resolves them."""
    from quicbed.spec.cellconfig import CellConfig

    try:
        return {a.name: a.stack for a in CellConfig.model_validate(cfg).resolved_arms()}
    except (QuicbedError, ValueError):
        return {}


def rows(root: Path) -> list[dict[str, Any]]:
    """One row per connection and side of every load and flow that recorded its sets."""
    from quicbed.results.transfers import BulkResult, CompeteResult

    store = Store.open_readonly(root)
    out: list[dict[str, Any]] = []
    try:
        configs = store.cell_configs()
        for a in store.all_attempts():
            cfg = configs.get(a.cell_id) or {}
            kind = cfg.get("kind", "page")
            base: dict[str, Any] = {"cell_id": a.cell_id, "attempt": a.attempt, "kind": kind}
            if kind == "page":
                stacks = _page_stacks(cfg)
                comps = (a.provenance or {}).get("components") or {}
                # each arm's own browser (a cell may load arms in two), else the cell's
                per_arm, browser = comps.get("browsers") or {}, comps.get("browser")
                for r in store.runs(a.cell_id, a.attempt):
                    facts = (r.detail or {}).get("server") or {}
                    one = {
                        **base,
                        "arm": r.arm,
                        "stack": stacks.get(r.arm),
                        "rep": r.rep,
                        "warmup": int(r.warmup),
                        "valid": int(r.valid),
                        "client": str(per_arm.get(r.arm) or browser or "the browser"),
                    }
                    out += [_row(one, *s) for s in _sets(facts)]
                continue
            row = store.transfer(a.cell_id, a.attempt)
            if row is None:
                continue
            model = BulkResult if row["kind"] == "bulk" else CompeteResult
            rec = model.model_validate(row["result"])
            stacks = {str(x.get("name")): str(x.get("stack")) for x in rec.arms}
            flows = (
                [(r.rep, r.flow) for r in rec.runs]
                if isinstance(rec, BulkResult)
                else [(r.rep, f) for r in rec.runs for f in r.flows]
            )
            for rep, f in flows:
                one = {
                    **base,
                    "arm": f.arm,
                    "stack": stacks.get(f.arm),
                    "rep": rep,
                    "warmup": 0,
                    "valid": int(f.ok),
                    "client": BULK_CLIENT,
                }
                out += [_row(one, *s) for s in _sets(f.evidence)]
    finally:
        store.close()
    return out


def by_client(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per client and parameter: the values the client advertised (the ``client`` side of
    every connection) and on how many connections each."""
    counts: dict[tuple[str, str], Counter[int]] = {}
    for r in table:
        if r["side"] != "client":
            continue
        for k in tparams.PARAMS:
            counts.setdefault((r["client"], k), Counter())[r[k]] += 1
    out = []
    for (client, k), c in sorted(
        counts.items(), key=lambda x: (x[0][0], list(tparams.PARAMS).index(x[0][1]))
    ):
        out.append(
            {
                "client": client,
                "parameter": k,
                "unit": tparams.PARAMS[k].unit,
                "values": ", ".join(
                    f"{v} ({n})" if len(c) > 1 else str(v) for v, n in sorted(c.items())
                ),
                "connections": sum(c.values()),
            }
        )
    return out
