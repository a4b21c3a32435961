"""Every preset and a set of ``--arms`` lines keep the cell IDs and spec digests they had.

A cell's ID and a spec's digest decide which stored results a run resumes, merges and
compares with: a refactoring that changes either silently orphans every results folder
made before it. ``tests/data/preset_identity.json`` was written by this module's
``main`` from the code as it stood before the stacks took over their arm settings
(issue 25); regenerate it only for a change that is meant to re-key stored results,
and say so in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from quicbed.model.link import make_condition
from quicbed.spec.arms import parse_cli
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec, plan

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "preset_identity.json"
#: arms as the CLI spells them, one cell each: built-in arms, a stack's own parameters,
#: a TCP arm's options and a gQUIC version, each typed as text on the command line
ARMS_LINES = (
    "h2,h3",
    "h2,h3,h3-quiche",
    "h2,h3:cc=reno",
    "h2,h3-n2:stack=quic-go:cubic_n=2",
    "h2,h3-b06:stack=quic-go:cubic_n=2:cubic_beta=0.6",
    "h2:tcp_sack=false:tcp_ecn=1:initcwnd=10,h3",
    "h2:rmem=ws2:tcp_window_scaling=true:tcp_fastopen=3,h3",
    "h2:cubic_beta=0.5,h3",
    "h2,gquic",
    "h2,gquic:quic_version=Q039",
    "h2:tls=1.2,gquic",
    "h2:cc=bbr,h3-quiche:cc=bbr2",
)


def identities() -> dict[str, Any]:
    """The identities the golden file holds, computed by today's code."""
    presets = {}
    for path in sorted((ROOT / "sweeps").glob("*.yaml")):
        spec = load_spec(path)
        presets[path.name] = {
            "digest": spec.digest(),
            "cells": [c.config.cell_id() for c in plan(spec, source=path.name)],
        }
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    cli = {}
    for line in ARMS_LINES:
        names, settings = parse_cli(line)
        cli[line] = make_cell(
            condition=cond, page="100kb", arms=names, arm_settings=settings
        ).cell_id()
    return {"presets": presets, "arms_lines": cli}


def test_presets_and_arms_lines_keep_their_identity() -> None:
    want = json.loads(GOLDEN.read_text())
    got = identities()
    assert set(got["presets"]) == set(want["presets"]), "a preset was added or removed: regenerate"
    for name, w in want["presets"].items():
        g = got["presets"][name]
        assert g["digest"] == w["digest"], f"{name}: the spec's digest changed"
        changed = [i for i, (a, b) in enumerate(zip(g["cells"], w["cells"], strict=True)) if a != b]
        assert not changed, f"{name}: cells {changed[:5]} changed their IDs"
    assert got["arms_lines"] == want["arms_lines"]


def main() -> None:
    GOLDEN.write_text(json.dumps(identities(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    main()
