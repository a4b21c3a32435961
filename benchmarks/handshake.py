"""The key exchange as the variable (issue 42): sweeps/handshake.yaml, X25519 against
X25519MLKEM768 on quic-go and quiche beside h2 (X25519), 5 KB and 100 KB pages at
10 Mbit/s, 36 and 112 ms, 0-RTT and 1-RTT, 20 loads + 1 warm-up per arm.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/handshake.py [--out DIR] [--md FILE] [--tables-only]

Prints, per cell and arm: the mode, the key-exchange groups its loads' ServerHellos
chose (every load is checked against its arm's pin), valid of the measured loads, mean
and standard deviation of PLT (ms), and from each valid load's first connection (its
level-full capture, read with tshark): the median ClientHello and server-flight bytes
(handshake messages), the median handshake span in round trips of the base RTT, and how
many were resumed; the cell's certificate chain and the median bytes of the chain on the
wire (0 or -: resumed, none sent), and for QUIC the client's first bytes and how many
server flights QUIC's anti-amplification limit held back; then per cell each pair (h2
against every QUIC arm, and each stack's classical against its post-quantum arm): the
difference of means in % (positive: the second arm is faster) and Welch's p. The head
gives the host's steal and busy shares over the run (/proc/stat) and the wall time.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from quicbed.analysis.cells import compare_cell
from quicbed.results.handshakes import load_groups
from quicbed.results.store import Store
from quicbed.spec.arms import own_pairs, parse_pairs
from quicbed.spec.sweepspec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from real_pages import _cells, _mean_sd, _table, bench_main

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "sweeps" / "handshake.yaml"
ARM_HEAD = ["Mbit/s", "RTT ms", "page", "mode", "arm", "groups", "valid", "PLT", "sd"]
ARM_HEAD += ["CH bytes", "flight bytes", "round trips", "resumed", "chain", "chain bytes"]
ARM_HEAD += ["client first", "held"]
PAIR_HEAD = ["Mbit/s", "RTT ms", "page", "mode", "pair", "PLT diff %", "Welch p"]


def _median(xs: list[float]) -> str:
    return f"{statistics.median(xs):g}" if xs else "-"


def arm_rows(root: Path) -> list[list[str]]:
    """One row per cell and arm, from the store alone."""
    store = Store(root)
    rows = []
    try:
        for cid, attempt, cfg, head in _cells(store):
            runs = store.runs(cid, attempt)
            for a in cfg.resolved_arms():
                measured = [r for r in runs if r.arm == a.name and not r.warmup]
                valid = [r for r in measured if r.valid]
                groups = sorted({g for r in measured for g in load_groups(r.detail)})
                first = [f for r in valid if (f := (r.detail.get("handshake") or {}).get("first"))]
                row = [*head[1:], cfg.mode, a.name, ",".join(groups) or "-"]
                row.append(f"{len(valid)}/{len(measured)}")
                row += _mean_sd(store.values(cid, attempt, a.name, "plt_ms"))
                for key in ("client_hello_bytes", "server_flight_bytes", "round_trips"):
                    row.append(_median([f[key] for f in first if f.get(key) is not None]))
                row.append(f"{sum(1 for f in first if f.get('resumed'))}/{len(first)}")
                row += [
                    cfg.certificate,
                    _median([f["certificate_bytes"] for f in first if f.get("certificate_bytes")]),
                ]
                row.append(
                    _median(
                        [
                            f["client_first_bytes"]
                            for f in first
                            if f.get("client_first_bytes") is not None
                        ]
                    )
                )
                row.append(f"{sum(1 for f in first if f.get('amplification_held'))}/{len(first)}")
                rows.append(row)
    finally:
        store.close()
    return rows


def pair_rows(root: Path) -> list[list[str]]:
    """Every pair the cell compares: the reference against each arm, then the spec's
    pairs (each stack's classical arm against its post-quantum one)."""
    spec = load_spec(SPEC).statistics
    extra = parse_pairs(spec.pairs)
    store = Store(root)
    out = []
    try:
        for cid, attempt, cfg, head in _cells(store):
            mine = own_pairs(extra, cfg.arms)
            cmps = compare_cell(store, cid, attempt, cfg, mine, spec.alpha, spec.test)
            for pair, cmp in cmps.items():
                row = [*head[1:], cfg.mode, pair]
                row.append(f"{cmp.pct_diff:+.1f}" if cmp.pct_diff is not None else "-")
                row.append(f"{cmp.welch_p:.2g}" if cmp.welch_p is not None else "-")
                out.append(row)
    finally:
        store.close()
    return out


def tables(root: Path) -> list[str]:
    return [*_table(ARM_HEAD, arm_rows(root)), "", *_table(PAIR_HEAD, pair_rows(root)), ""]


def main() -> int:
    return bench_main(__doc__ or "", "handshake.py", SPEC, "qbhs", tables)


if __name__ == "__main__":
    sys.exit(main())
