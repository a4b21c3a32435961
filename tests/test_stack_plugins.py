"""A stack is one module: a toy stack defined only in the test tree is resolved, typed,
bounded, drawn and refused by kind with no file of quicbed/ naming it; and what a
stack says it cannot do is refused before anything starts (issue 25, items 1 and 2)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.servers import get_stack, stacks
from quicbed.servers.webserver import WebServer
from quicbed.spec.arms import ArmSettings, arm_colour, builtin_arms, param_model, parse_cli, resolve
from quicbed.spec.bulkobjects import object_path
from quicbed.spec.cellconfig import Transfer, make_cell

ROOT = Path(__file__).resolve().parent.parent
COND = make_condition(rate_mbit=10, rtt_ms=36)
BULK = ("--arms", "h2,gquic", "--size", "10MB", "--reps", "2", "--out")


def _forget() -> None:
    stacks.cache_clear()
    param_model.cache_clear()


@pytest.fixture
def toy() -> Iterator[type]:
    """The toy stack registered for one test, and gone after it (other tests' messages
    list every stack's arms and parameters)."""
    _forget()
    # reloaded, so each test defines the class afresh (the last one was taken out)
    mod = sys.modules.get("toystack")
    ToyServer = (importlib.reload(mod) if mod else importlib.import_module("toystack")).ToyServer

    yield ToyServer
    # a class outlives its module while anything refers to it; the registry lists only
    # classes that carry their own name, so taking the name takes the stack out (of
    # every toy class still alive, however it was imported)
    todo = list(WebServer.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__dict__.get("name") == "toy":
            del cls.name
    _forget()
    assert "toy" not in stacks()


def test_the_toy_stack_is_found_and_its_arm_resolves(toy: type) -> None:
    assert get_stack("toy") is toy
    assert builtin_arms()["h3-toy"] == "toy"
    names, settings = parse_cli("h2,h3-toy:cc=toycc:window_kb=256")
    _, arm = resolve(names, settings, "cubic")
    assert (arm.stack, arm.cc, arm.params, arm.port) == ("toy", "toycc", {"window_kb": 256}, 443)
    assert arm_colour("h3-toy") == "#123456"
    cell = make_cell(condition=COND, page="5kb", arms=names, arm_settings=settings)
    assert cell.resolved_arms()[1].params == {"window_kb": 256}


def test_the_toy_stacks_own_bounds_and_knobs_are_refused_by_name(toy: type) -> None:
    with pytest.raises(QuicbedError, match=r"arm h3-toy: window_kb must be in \[16, 65536\]"):
        resolve(*parse_cli("h2,h3-toy:window_kb=8"), "cubic")
    with pytest.raises(QuicbedError, match=r"toy has no parameter cubic_beta \(it takes window_kb"):
        resolve(("h3-toy",), {"h3-toy": ArmSettings(cubic_beta=0.7)}, "cubic")
    # a knob no stack has is refused where it is typed, naming every stack's knobs
    with pytest.raises(QuicbedError, match=r"'colour=red' is not KEY=VALUE .*window_kb"):
        parse_cli("h3-toy:colour=red")
    # its N is typed as quic-go types it; quic-go still refuses the toy's knob
    with pytest.raises(QuicbedError, match="quic-go has no parameter window_kb"):
        resolve(*parse_cli("h3:window_kb=64"), "cubic")


def test_a_stack_that_serves_pages_only_is_refused_in_a_transfer_cell(toy: type) -> None:
    with pytest.raises(QuicbedError, match="toy cannot be measured in a bulk cell"):
        resolve(("h2", "h3-toy"), {}, "cubic", "bulk")


def test_gquic_in_a_bulk_cell_is_refused_by_name() -> None:
    """The case that got through: gQUIC has no transfer client (issue 25)."""
    with pytest.raises(QuicbedError, match="arm gquic: gquic cannot be measured in a bulk cell"):
        make_cell(
            condition=COND,
            page=object_path("10MB"),
            arms=("h2", "gquic"),
            kind="bulk",
            warmup=0,
            transfer=Transfer(size="10MB"),
        )


@pytest.mark.root
def test_quicbed_bulk_refuses_gquic_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "bulk"
    cp = subprocess.run(
        [sys.executable, "-m", "quicbed", "bulk", "--rate", "10", "--rtt", "36", *BULK, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert cp.returncode != 0
    assert "gquic cannot be measured in a bulk cell" in cp.stderr + cp.stdout
    assert not (out / "store.sqlite").exists()
