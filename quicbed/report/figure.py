"""What a report figure is: one class per kind of figure, drawn from what the report read.

The report (quicbed.report.build) reads the results folder once into a
:class:`ReportInput` and asks every :class:`ReportFigure` of the registry, in its
``order``, for its figures: a new figure is one subclass with its own ``name``, defined
anywhere that is imported before the report is built (a module of this package, or a
test), and nothing else names it. Its files go to ``figures/`` (PNG and SVG through
quicbed.figsave, byte-reproducible, so a replication package that rebuilds the report
gets the same bytes), its numbers to figures.json, and the HTML shows it with its title.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:
    from quicbed.report.cellrow import CellRow


class Drawn(NamedTuple):
    """A figure as drawn, before the report makes it one of its figures: its title, its
    files (PNG, then SVG) and what it shows, the numbers figures.json keeps of it (each
    kind of figure its own keys)."""

    title: str
    paths: list[Path]
    shows: dict[str, Any]
    #: lines the HTML prints under its caption (None: none)
    notes: list[str] | None = None


@dataclass(frozen=True)
class ReportInput:
    """What every figure draws from: the report's page-cell rows (each cell's latest
    attempt, one row per pair of arms) and the folder's statistics settings."""

    root: Path
    #: the report's folder; figures write into ``out / "figures"``
    out: Path
    rows: list[CellRow]
    alpha: float
    test: str
    correction: str
    #: the pages in the workloads' order (how a figure orders its page axis)
    page_order: list[str]
    #: per-load figures besides PLT whose comparisons the report draws (the spec's
    #: ``statistics.metrics`` and ``quicbed report --metric``; METRICS)
    metrics: tuple[str, ...] = ()

    @property
    def figures_dir(self) -> Path:
        return self.out / "figures"


class ReportFigure(ABC):
    """One kind of figure of the report's page cells."""

    #: the registry name (figures.json keeps it under ``figure``)
    name: ClassVar[str]
    #: where its figures stand among the report's, lowest first
    order: ClassVar[int] = 100

    @abstractmethod
    def draw(self, data: ReportInput) -> list[Drawn]:
        """Its figures for this report (none where its cells are not there)."""


def report_figures() -> list[type[ReportFigure]]:
    """Every figure class that names itself, by ``order`` then name: those of the
    modules imported so far (the report's own are defined in quicbed.report.build)."""
    found: dict[str, type[ReportFigure]] = {}
    todo: list[type[ReportFigure]] = list(ReportFigure.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in cls.__dict__:
            found[cls.name] = cls
    return sorted(found.values(), key=lambda c: (c.order, c.name))


def entry(drawn: Drawn) -> dict[str, Any]:
    """A figure of the HTML report: its title, its files' names, the PNG inlined (the
    report works offline and inside a package), what it shows and its notes. What it
    shows always carries its title (figures.json's readers, the package's README, name a
    figure by it); a figure that put it there itself keeps its keys' order."""
    shows = drawn.shows if "title" in drawn.shows else {**drawn.shows, "title": drawn.title}
    fig = {
        "title": drawn.title,
        "png": drawn.paths[0].name,
        "svg": drawn.paths[1].name,
        "data": base64.b64encode(drawn.paths[0].read_bytes()).decode(),
        "shows": shows,
    }
    if drawn.notes is not None:
        fig["notes"] = drawn.notes
    return fig
