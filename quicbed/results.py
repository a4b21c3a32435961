"""Reading results: what a stored attempt says, computed one way for every consumer.

The cell's summary, ``cell --from``'s side-by-side, the report and the package's
check all ask the same questions of a store; they ask them here.
"""

from __future__ import annotations

from typing import Any

from quicbed.arms import pairs
from quicbed.cellconfig import CellConfig
from quicbed.stats import DEFAULT_ALPHA, Comparison, compare
from quicbed.store import Store
from quicbed.testbed.base import testbed_id


def compare_cell(
    store: Store, cell_id: str, attempt: int, cfg: CellConfig,
    extra_pairs: list[tuple[str, str]] | None = None, alpha: float = DEFAULT_ALPHA,
) -> dict[str, Comparison]:  # fmt: skip
    """The comparisons of one attempt, by pair name ``reference/candidate``
    (quicbed.arms.pairs): every arm against the reference arm, then ``extra_pairs``."""
    out = {}
    for a, b in pairs(cfg.resolved_arms(), extra_pairs):
        out[f"{a}/{b}"] = compare(store.plts(cell_id, attempt, a), store.plts(cell_id, attempt, b),
                                  planned=cfg.runs, alpha=alpha, tcp_arm=a,
                                  quic_arm=b)  # fmt: skip
    return out


def measured_on(provenance: dict[str, Any] | None) -> dict[str, Any]:
    """Which testbed measured an attempt, from its provenance: its identity, a label, its
    hardware (Emulab's node type where the nodes report one, else the CPU model), the
    kernels and the OS images. A sweep over several testbeds reports by these."""
    prov = provenance or {}
    desc = prov.get("testbed") or {}
    if desc.get("kind") == "ssh":
        label = desc.get("source") or testbed_id(desc)
        nodes = prov.get("nodes") or {}
        descnodes = desc.get("nodes") or {}

        def per_role(get: Any) -> str | None:
            vals = {r: get(r) for r in ("server", "client", "bridge") if get(r)}
            if not vals:
                return None
            if len(set(vals.values())) == 1:
                return next(iter(vals.values()))
            return ", ".join(f"{r} {v}" for r, v in vals.items())

        def mach(key: str) -> Any:
            return lambda r: ((nodes.get(r) or {}).get("machine") or {}).get(key)

        hardware = per_role(lambda r: (descnodes.get(r) or {}).get("hardware_type")
                            or mach("node_type")(r) or mach("cpu")(r))  # fmt: skip
        kernel = per_role(mach("kernel"))
        image = per_role(lambda r: (descnodes.get(r) or {}).get("image") or mach("os")(r))
    else:
        m = prov.get("machine") or {}
        label = testbed_id(desc)
        hardware, kernel, image = m.get("cpu"), m.get("kernel"), m.get("os")
    return {"id": testbed_id(desc), "label": label, "hardware": hardware or "unknown",
            "kernel": kernel, "image": image}  # fmt: skip
