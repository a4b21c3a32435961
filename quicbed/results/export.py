"""Tidy export: one row per load with every parameter, for pandas users.

Columns are named, never positional: the condition, the cell settings, the run's
validity and reason, PLT and its companions (TTFB, FCP and LCP with the LCP element's
tag and size), and what the link and the host did during the load
(quicbed.results.linkload). Refuses to overwrite unless asked.
A second table, ``transport-params``, has a row per connection and side of every QUIC
load and flow: the transport parameters each end advertised (quicbed.results.advertised);
a third, ``handshakes``, a row per connection of every load: its TLS hellos and, at
``--traces full``, its whole handshake (quicbed.results.handshakes).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.results.linkload import COLUMNS as LINK_COLUMNS
from quicbed.results.linkload import figures as link_figures
from quicbed.results.linkload import load_proof
from quicbed.results.store import Store

COLUMNS = [
    "cell_id",
    "attempt",
    "attempt_status",
    "latest_attempt",
    "arm",
    "rep",
    "seq",
    "warmup",
    "valid",
    "reason",
    "page",
    "mode",
    "runs",
    "rate_mbit",
    "rtt_ms",
    "delay_down_ms",
    "delay_up_ms",
    "loss_pct",
    "jitter_ms",
    "jitter_kind",
    "queue",
    "seed",
    "cc",
    "order",
    "plt_ms",
    "onload_ms",
    "dns_ms",
    "nav_load_ms",
    "ttfb_ms",
    "fcp_ms",
    "lcp_ms",
    "lcp_element",
    "lcp_size",
    "speed_index_ms",
    "visual_complete_ms",
    "objects",
    "bytes",
    "protocols",
    "used_0rtt",
    "tls_resumed",
    "main_connect_ms",
    "main_ssl_ms",
    "started",
    "har_path",
    *LINK_COLUMNS,
]


def _flat(v: Any) -> Any:
    """Flags as 0/1, as the store keeps them: the table's types do not follow Python's."""
    return int(v) if isinstance(v, bool) else v


def _lcp_element(detail: dict[str, Any]) -> dict[str, Any]:
    """The LCP element's tag and size (CSS px squared) from a load's paint record; None
    where no LCP was read (or the store predates it)."""
    lcp = (detail.get("paint") or {}).get("lcp") or {}
    return {"lcp_element": lcp.get("element"), "lcp_size": lcp.get("size")}


def rows(root: Path) -> list[dict[str, Any]]:
    store = Store(root)
    try:
        latest = {c: a.attempt for c, a in store.latest_attempts().items()}
        out = []
        for cid in store.cells():
            cfg = store.cell_config(cid)
            cond = cfg["condition"]
            for a in store.attempts(cid):
                att, status = a.attempt, a.status
                for r in store.runs(cid, att):
                    detail = r.detail or {}
                    out.append(
                        {
                            **{
                                k: _flat(getattr(r, k))
                                for k in (
                                    "cell_id",
                                    "attempt",
                                    "arm",
                                    "rep",
                                    "seq",
                                    "warmup",
                                    "valid",
                                    "reason",
                                    "plt_ms",
                                    "onload_ms",
                                    "dns_ms",
                                    "nav_load_ms",
                                    "ttfb_ms",
                                    "fcp_ms",
                                    "lcp_ms",
                                    "speed_index_ms",
                                    "visual_complete_ms",
                                    "objects",
                                    "bytes",
                                    "used_0rtt",
                                    "tls_resumed",
                                    "started",
                                    "har_path",
                                )
                            },
                            "attempt_status": status,
                            "latest_attempt": att == latest.get(cid),
                            "page": cfg["page"],
                            "mode": cfg["mode"],
                            "runs": cfg["runs"],
                            "cc": cfg["cc"],
                            "order": cfg["order"],
                            **{
                                k: cond.get(k)
                                for k in (
                                    "rate_mbit",
                                    "rtt_ms",
                                    "delay_down_ms",
                                    "delay_up_ms",
                                    "loss_pct",
                                    "jitter_ms",
                                    "jitter_kind",
                                    "queue",
                                    "seed",
                                )
                            },
                            "protocols": ",".join(r.protocols or []),
                            "main_connect_ms": detail.get("main_connect_ms"),
                            "main_ssl_ms": detail.get("main_ssl_ms"),
                            **_lcp_element(detail),
                            **link_figures(load_proof(detail)),
                        }
                    )
        return out
    finally:
        store.close()


def _tables() -> dict[str, tuple[list[str], Any]]:
    from quicbed.results import advertised, handshakes

    return {
        "runs": (COLUMNS, rows),
        "transport-params": (advertised.COLUMNS, advertised.rows),
        "handshakes": (handshakes.COLUMNS, handshakes.rows),
    }


def export(
    root: Path,
    fmt: str,
    dest: Path | None = None,
    replace: bool = False,
    source: str | None = None,
    table: str = "runs",
) -> Path:
    """Write the tidy ``table`` (runs, transport-params or handshakes); ``source`` names the
    results in the Parquet metadata (default: the folder's path; a replication package
    names itself instead)."""
    if fmt not in ("csv", "parquet"):
        raise QuicbedError(f"--format: unknown {fmt!r} (csv or parquet)")
    tables = _tables()
    if table not in tables:
        raise QuicbedError(f"--table: unknown {table!r} ({' or '.join(tables)})")
    columns, make = tables[table]
    if dest is None:
        dest = Path(root) / f"{table.replace('-', '_')}.{fmt}"
    elif dest.is_dir():
        raise QuicbedError(f"-o: {dest} is a folder; give the file to write")
    elif not dest.parent.is_dir():
        raise QuicbedError(f"-o: folder {dest.parent} does not exist")
    if dest.exists() and not replace:
        raise QuicbedError(f"{dest} exists; pass --replace to overwrite it")
    data = make(Path(root))
    tmp = dest.with_name(dest.name + ".tmp")
    if fmt == "csv":
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(data)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrow = pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in data])
        meta = {"quicbed": json.dumps({"source": source or str(root)})}
        arrow = arrow.replace_schema_metadata(meta)
        pq.write_table(arrow, tmp)
    tmp.replace(dest)
    return dest
