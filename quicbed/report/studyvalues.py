"""A study's own numbers beside quicbed's, each judged by a rule the catalog states.

A catalog entry (quicbed.spec.catalog) may carry ``compare``: numbers its study states
in its text or tables (value, unit, where in the study), each with where quicbed's
counterpart is in a built report (one of its CSV tables, a row chosen by column
values, the column or columns summed, scaled, optionally as a percentage of another
row) and the rule that decides whether the two agree (within a tolerance, or below or
above a bound). "Agrees" is then the rule's verdict over two printed numbers, never a
sentence: ``quicbed reproduce ID --out DIR`` prints the table and writes it to
``report/compare.csv``.

Why CSV tables: they are what the report already derives from the store for every
figure (table.csv for page cells, transfers.csv for bulk and compete flows, profile.csv
for CPU shares), so a study value reads the same number a figure draws.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from quicbed.errors import QuicbedError
from quicbed.spec.catalog import Entry, StudyValue

FILE = "compare.csv"
COLUMNS = ["entry", "what", "source", "unit", "study", "quicbed", "difference", "rule", "verdict"]


@dataclass(frozen=True)
class Verdict:
    """One study value against quicbed's: ``verdict`` is ``agrees``, ``differs`` or
    ``not measured`` (with ``problem``: the report has no such row, or no value in it)."""

    entry: str
    value: StudyValue
    quicbed: float | None
    verdict: str
    problem: str = ""

    @property
    def difference(self) -> float | None:
        return None if self.quicbed is None else self.quicbed - self.value.study

    def row(self) -> dict[str, str]:
        v = self.value
        return {
            "entry": self.entry,
            "what": v.what,
            "source": v.source,
            "unit": v.unit,
            "study": f"{v.study:.4g}",
            "quicbed": "-" if self.quicbed is None else f"{self.quicbed:.4g}",
            "difference": "-" if self.difference is None else f"{self.difference:+.4g}",
            "rule": v.rule.describe(v.unit),
            "verdict": self.verdict + (f" ({self.problem})" if self.problem else ""),
        }


def _matches(row: dict[str, str], where: dict[str, str | float]) -> bool:
    for col, want in where.items():
        got = row.get(col)
        if got is None:
            return False
        if isinstance(want, int | float) and not isinstance(want, bool):
            try:
                if not math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9):
                    return False
            except ValueError:
                return False
        elif got != str(want):
            return False
    return True


def _read(report: Path, table: str) -> list[dict[str, str]]:
    path = report / table
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _value(rows: list[dict[str, str]], where: dict[str, str | float], columns: list[str]) -> float:
    """The sum of ``columns`` in the rows ``where`` selects, which must agree on it (a
    table may repeat an arm's row once per comparison it is in)."""
    found = [r for r in rows if _matches(r, where)]
    if not found:
        raise LookupError(f"no row with {_describe(where)}")
    sums = set()
    for r in found:
        cells = [r.get(c) for c in columns]
        missing = [c for c, x in zip(columns, cells, strict=True) if x in (None, "")]
        if missing:
            raise LookupError(f"the row with {_describe(where)} has no {', '.join(missing)}")
        sums.add(round(sum(float(x) for x in cells if x is not None), 12))
    if len(sums) > 1:
        raise QuicbedError(
            f"catalog: {len(found)} rows with {_describe(where)} differ in "
            f"{'+'.join(columns)}; name the row by more columns"
        )
    return sums.pop()


def _describe(where: dict[str, str | float]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items())


def judge(entry: Entry, report: Path) -> list[Verdict]:
    """Each of ``entry``'s study values against the report in ``report``."""
    out = []
    for v in entry.compare:
        rows = _read(report, v.table)
        try:
            got = _value(rows, v.where, v.columns()) * v.scale
            if v.relative_to is not None:
                ref = _value(rows, v.relative_to, v.columns()) * v.scale
                if ref == 0:
                    raise LookupError(f"the reference row ({_describe(v.relative_to)}) is 0")
                got = 100 * got / ref
        except LookupError as exc:
            out.append(Verdict(entry.id, v, None, "not measured", str(exc).strip("'\"")))
            continue
        out.append(Verdict(entry.id, v, got, "agrees" if v.rule.holds(got, v.study) else "differs"))
    return out


def write(report: Path, verdicts: list[Verdict]) -> Path | None:
    """``report/compare.csv`` (none without verdicts)."""
    if not verdicts:
        return None
    path = report / FILE
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(v.row() for v in verdicts)
    return path


def markdown(verdicts: list[Verdict]) -> str:
    """The verdicts as a Markdown table (what ``reproduce`` prints and the docs paste)."""
    head = ["what", "study", "quicbed", "difference", "rule", "verdict", "source"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in verdicts:
        r = v.row()
        unit = f" {r['unit']}" if r["unit"] else ""
        ours = r["quicbed"] + (unit if r["quicbed"] != "-" else "")
        cells = [r["what"], r["study"] + unit, ours, r["difference"], r["rule"], r["verdict"]]
        lines.append("| " + " | ".join([*cells, r["source"]]) + " |")
    return "\n".join(lines)
