"""The matching rule's shared cases (tests/data/replay/match-cases.json) against
quicbed.replay.archive.Archive.match: the same table go/internal/replay's match_test.go
runs against the Go server's matcher (docs/replay.md, "The matching rule")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quicbed.replay.archive import Archive

TABLE = Path(__file__).parent / "data" / "replay" / "match-cases.json"
DATA: dict[str, Any] = json.loads(TABLE.read_text())


def test_table_covers_every_way_of_matching() -> None:
    assert {c["match"] for c in DATA["cases"]} == {"url", "path", "none"}
    assert len({c["name"] for c in DATA["cases"]}) == len(DATA["cases"])


@pytest.mark.parametrize("case", DATA["cases"], ids=[c["name"] for c in DATA["cases"]])
def test_match_case(case: dict[str, Any]) -> None:
    archive = Archive.model_validate(DATA["archive"])
    found = archive.match(case["method"], case["url"])
    got = (None, "none") if found is None else (found[0].url, found[1])
    assert got == (case["entry"], case["match"])
