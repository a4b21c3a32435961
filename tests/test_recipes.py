"""docs/extending.md's recipes held against the plug-in interfaces they describe: a
recipe that lists a member the class lacks, misses one it requires, or leaves out one
that a plug-in of the project sets, fails here (issue 44)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from quicbed.backends import Backend, backends
from quicbed.client import browsers
from quicbed.client.browser import Browser
from quicbed.report.build import PairHeatmaps
from quicbed.report.figure import ReportFigure, report_figures
from quicbed.servers import stacks
from quicbed.servers.webserver import WebServer
from quicbed.shapers import shapers
from quicbed.shapers.shaper import Shaper
from quicbed.testbed import lifecycle
from quicbed.testbed.lifecycle import Testbed

DOC = Path(__file__).resolve().parent.parent / "docs" / "extending.md"


def _tables(section: str) -> list[tuple[set[str], set[str]]]:
    """Each member table of a section of the recipes: (every member it lists, those it
    marks required). A row names its members in backticks in its first cell."""
    doc = DOC.read_text()
    text = doc.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for table in re.split(r"\n\s*\n", text):
        rows = re.findall(r"^\s*\| (.+?) \| (yes|no) \|", table, re.M)
        if not rows:
            continue
        listed: set[str] = set()
        required: set[str] = set()
        for first, req in rows:
            names = {n.split("(")[0] for n in re.findall(r"`([^`]+)`", first)}
            listed |= names
            if req == "yes":
                required |= names
        out.append((listed, required))
    return out


def _annotations(base: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cls in reversed(base.__mro__):
        out |= inspect.get_annotations(cls)
    return out


def _required(base: type, beside: Iterable[type] = ()) -> set[str]:
    """What a plug-in must give: the abstract members and the attributes declared without
    a value, less those that another interface of the same recipe (``beside``) requires."""
    own = set(getattr(base, "__abstractmethods__", ()))
    own |= {n for n in _annotations(base) if not hasattr(base, n)}
    for other in beside:
        own -= _required(other)
    return own


def _public(base: type) -> set[str]:
    return {n for n in dir(base) if not n.startswith("_")} | set(_annotations(base))


def _set_by(plugins: Iterable[type], base: type, beside: Iterable[type] = ()) -> set[str]:
    """Every public member of ``base`` that a plug-in of the project (or a class between it
    and ``base``) defines itself: what a new plug-in's author will want to know of."""
    theirs = set().union(*(_public(b) for b in beside)) if beside else set()
    out: set[str] = set()
    for cls in plugins:
        for k in cls.__mro__:
            if k is not base and issubclass(k, base) and k not in beside:
                out |= {n for n in vars(k) if n in _public(base) and n not in theirs}
    return out


RECIPES = {
    "stack": ("A server stack", 0, WebServer, lambda: stacks().values(), ()),
    "browser": ("A browser", 0, Browser, lambda: browsers().values(), ()),
    "shaper": ("A shaper", 0, Shaper, lambda: shapers().values(), ()),
    "figure": ("A report figure", 0, ReportFigure, report_figures, ()),
    "backend kind": ("A testbed backend", 0, Backend, lambda: backends().values(), ()),
    "testbed": (
        "A testbed backend",
        1,
        Testbed,
        lambda: [lifecycle.testbed_class(k) for k in backends()],
        (Backend,),
    ),
}


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_a_recipe_lists_what_its_interface_requires_and_its_plugins_set(recipe: str) -> None:
    section, index, base, plugins, beside = RECIPES[recipe]
    listed, required = _tables(section)[index]
    assert required == _required(base, beside), "required members: doc vs interface"
    assert not listed - _public(base), "listed, but not members of the interface"
    missing = _set_by(plugins(), base, beside) - listed
    assert not missing, f"set by the project's {recipe}s but not in the recipe: {missing}"


def test_the_reports_own_figures_are_registered_in_order() -> None:
    assert report_figures()[0] is PairHeatmaps
    assert [f.name for f in report_figures()][:4] == [
        "heatmaps",
        "metric-heatmaps",
        "lines",
        "mode-heatmaps",
    ]


def test_the_shaper_recipe_lists_every_member_of_its_interface() -> None:
    """The shaper interface is small enough that its recipe names all of it."""
    ((listed, _),) = _tables("A shaper")
    public = {n for n in vars(Shaper) if not n.startswith("_")} | set(Shaper.__annotations__)
    assert listed == public
