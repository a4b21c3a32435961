"""docs/extending.md's recipes proven end to end (issue 44): a stack, a browser, a
shaper, a testbed backend and a report figure that exist only in this test, registered
by being defined, measured (or drawn) in a real cell, stored, reported, recorded in
provenance and packaged into a replication package that verifies, with no file of
quicbed/ naming them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import matplotlib.pyplot as plt
import pytest

from quicbed.backends import Backend, LocalBackend, backends
from quicbed.client import browsers
from quicbed.client.browser import Browser
from quicbed.client.chromium import Chromium
from quicbed.figsave import save_figure
from quicbed.model.link import make_condition
from quicbed.package.build import build_package
from quicbed.package.verify import verify
from quicbed.report.build import build
from quicbed.report.figure import Drawn, ReportFigure, ReportInput, report_figures
from quicbed.results.store import Store
from quicbed.run.cell import run_cell
from quicbed.servers import stacks
from quicbed.servers.quic_go import QuicGoServer
from quicbed.servers.webserver import WebServer
from quicbed.shapers import shapers
from quicbed.shapers.shaper import Shaper
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.spec.arms import param_model
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed import lifecycle
from quicbed.testbed.local import LocalTestbed

STACK, ARM, SHAPER, BROWSER = "toy-go", "h3-toygo", "toy-em", "toy-chrome"
FIGURE, KIND = "toy-means", "toy-ns"


def _forget() -> None:
    stacks.cache_clear()
    backends.cache_clear()
    param_model.cache_clear()
    shapers.cache_clear()
    browsers.cache_clear()


def _unregister(base: type, name: str, key: str = "name") -> None:
    """Take a test's plug-in out of its registry: the registries list only classes that
    carry their own ``name`` (a backend: its own ``kind``)."""
    todo: list[type] = list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__dict__.get(key) == name:
            delattr(cls, key)


@pytest.fixture
def toys() -> Iterator[list[str]]:
    """A stack that starts quic-go's server under a name of its own, a browser that starts
    Chromium under another, and a shaper that runs the userspace emulator under a third:
    each one class, as the recipes say. Yields the arms the toy browser launched for."""
    launched: list[str] = []

    class ToyGoServer(QuicGoServer):
        name = STACK
        arms = (ARM,)
        colour = "#2e8b57"

    class ToyShaper(UserspaceShaper):
        name = SHAPER
        summary = "the userspace emulator under a test's name"
        auto_rank: int | None = None  # only when named

    class ToyFigure(ReportFigure):
        """Each pair's mean PLTs as two bars, after the report's own figures."""

        name = FIGURE
        order = 90

        def draw(self, data: ReportInput) -> list[Drawn]:
            out = []
            for r in data.rows:
                if r.mean_ref is None or r.mean_cand is None:
                    continue
                fig, ax = plt.subplots(figsize=(4, 3))
                ax.bar([r.ref, r.cand], [r.mean_ref, r.mean_cand])
                ax.set_ylabel("mean PLT [ms]")
                title = f"toy: mean PLT, {r.ref} vs {r.cand}, cell {r.cell_id}"
                ax.set_title(title, fontsize=8)
                paths = save_figure(fig, data.figures_dir / f"toy-{r.cell_id}-{r.cand}")
                plt.close(fig)
                shows = {"figure": FIGURE, "means": [r.mean_ref, r.mean_cand]}
                out.append(Drawn(title, paths, shows))
            return out

    class ToyChromium(Chromium):
        name = BROWSER
        label = "Toy Chromium"
        seen: ClassVar[list[str]] = launched

        def launch(self) -> None:
            self.seen.append(self.spec.arm)
            super().launch()

    class ToyBackend(LocalBackend):
        """The local namespaces under a test's name: the recipe's kind..."""

        kind = KIND
        help = "namespaces here, under a test's name"

    class ToyTestbed(ToyBackend, LocalTestbed):
        """...and its testbed."""

    _forget()
    try:
        assert backends()[KIND] is ToyBackend and lifecycle.testbed_class(KIND) is ToyTestbed
        assert stacks()[STACK] is ToyGoServer and shapers()[SHAPER] is ToyShaper
        assert browsers()[BROWSER] is ToyChromium
        assert report_figures()[-1] is ToyFigure
        yield launched
    finally:
        _unregister(WebServer, STACK)
        _unregister(Shaper, SHAPER)
        _unregister(Browser, BROWSER)
        _unregister(ReportFigure, FIGURE)
        _unregister(Backend, KIND, key="kind")
        _forget()
    assert STACK not in stacks() and SHAPER not in shapers() and BROWSER not in browsers()
    assert FIGURE not in [f.name for f in report_figures()] and KIND not in backends()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_toy_plugins_go_from_a_cell_to_a_verified_package(
    toys: list[str], prefix: str, tmp_path: Path
) -> None:
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36),
        page="5kb",
        runs=3,
        warmup=1,
        arms=["h2", ARM],
        shaper=SHAPER,
        browser=BROWSER,
    )
    out = tmp_path / "res"
    testbed = lifecycle.testbed_class(KIND).from_options(
        prefix=prefix, hosts=None, user=None, key=None
    )
    r = run_cell(cfg, out, testbed=testbed, receipt_tcp_seconds=2)
    assert r.status == "done", r.problem
    assert sorted(set(toys)) == sorted(["h2", ARM])  # every arm's pages in the toy browser
    assert r.receipt is not None and r.receipt.shaper.get("shaper") == SHAPER
    store = Store.open_readonly(out)
    try:
        runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == ARM and x.valid]
        prov = store.attempt(r.cell_id, r.attempt).provenance or {}
    finally:
        store.close()
    assert len(runs) >= 2 and all(x.protocols == ["h3"] for x in runs)
    # its server's build recorded under its program's name, as the software check reads it
    assert QuicGoServer.software_name in (prov.get("software") or {}), prov.get("software")
    assert prov["testbed"]["kind"] == KIND  # the toy backend measured it, and says so
    report = build(out)
    (row,) = [x for x in report.rows if x.cell_id == r.cell_id]
    assert ARM in row.arms and row.arms[ARM].stack == STACK
    html = (out / "report" / "index.html").read_text()
    assert ARM in html and f"toy: mean PLT, h2 vs {ARM}" in html  # the toy figure, titled
    drawn = json.loads((out / "report" / "figures.json").read_text())
    (toy,) = [f for f in drawn if f["shows"].get("figure") == FIGURE]
    assert (out / "report" / "figures" / toy["svg"]).is_file()
    home = tmp_path / "home"
    home.mkdir()
    pkg = build_package(out, tmp_path / "toy.tar.gz", home=home, environ={})
    res = verify(pkg.path)
    assert res.ok, res.problems
