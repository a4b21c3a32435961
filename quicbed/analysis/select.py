"""Finding stored cells by ID or by a ``--where`` filter such as ``rate=50,rtt=36,page=5kb``."""

from __future__ import annotations

from typing import Any

from quicbed.errors import QuicbedError
from quicbed.results.store import Store
from quicbed.spec.cellconfig import parse_rate

#: filter keys and where they live in a stored cell configuration
KEYS = {
    "rate": ("condition", "rate_mbit"),
    "rtt": ("condition", "rtt_ms"),
    "loss": ("condition", "loss_pct"),
    "jitter": ("condition", "jitter_ms"),
    "jitter_kind": ("condition", "jitter_kind"),
    "queue": ("condition", "queue"),
    "page": (None, "page"),
    "mode": (None, "mode"),
    "runs": (None, "runs"),
}


def parse_where(where: str) -> dict[str, str]:
    out = {}
    for part in where.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key or not value:
            raise QuicbedError(f"--where: {part.strip()!r} is not key=value (e.g. rate=50,rtt=36)")
        if key not in KEYS:
            raise QuicbedError(f"--where: unknown key {key!r} (one of {', '.join(KEYS)})")
        if key == "rate":
            try:
                parse_rate(value)
            except QuicbedError as exc:
                raise QuicbedError(f"--where: {exc}") from None
        out[key] = value
    return out


def _matches(cfg: dict[str, Any], flt: dict[str, str]) -> bool:
    for key, want in flt.items():
        section, field = KEYS[key]
        have = (cfg[section] if section else cfg).get(field)
        if key == "rate":  # read as the CLI and specs read it: unlimited is a stored null
            if (None if have is None else float(have)) != parse_rate(want):
                return False
        elif isinstance(have, (int, float)) and not isinstance(have, bool):
            try:
                if float(want) != float(have):
                    return False
            except ValueError:
                return False
        elif str(have) != want:
            return False
    return True


def find_cell(store: Store, *, cell_id: str | None, where: str | None) -> str:
    """Exactly one cell, or an error that says what matched."""
    if bool(cell_id) == bool(where):
        raise QuicbedError("give exactly one of --cell ID and --where FILTER")
    cells = store.cells()
    if cell_id:
        hits = [c for c in cells if c.startswith(cell_id)]
    else:
        flt = parse_where(where or "")
        hits = [c for c in cells if _matches(store.cell_config(c), flt)]
    if not hits:
        raise QuicbedError(f"no cell matches {cell_id or where!r} in {store.root}")
    if len(hits) > 1:
        raise QuicbedError(
            f"{len(hits)} cells match {cell_id or where!r} ({', '.join(hits[:5])}); "
            "be more specific"
        )
    return hits[0]
