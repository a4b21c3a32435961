"""The CLI's shared options: one typed group each, defaults taken from the models, one
reading of a rate. Pure tests: no root, no testbed, no browser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from quicbed.cli.main import app
from quicbed.cli.options import LinkOptions, TestbedOptions
from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition, make_condition
from quicbed.spec.cellconfig import UNLIMITED, CellConfig, make_cell, parse_rate
from quicbed.spec.sweepspec import Defaults, Scenario, SweepSpec, plan

#: CLI option -> the LinkCondition field whose default it must have
LINK_FIELDS = {
    "loss": "loss_pct",
    "jitter": "jitter_ms",
    "jitter_kind": "jitter_kind",
    "queue": "queue",
    "count": "count",
    "seed": "seed",
}
CELL_FIELDS = ("runs", "warmup", "mode", "order", "cc", "shaper")
TESTBED = ("prefix", "kind", "hosts", "ssh_user", "ssh_key")


def _params(*path: str) -> dict[str, Any]:
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {p.name: p for p in cmd.params}


def _model_default(model: type, name: str) -> Any:
    return model.model_fields[name].get_default(call_default_factory=True)


@pytest.mark.parametrize("path", [("cell",), ("link", "check")])
def test_cli_defaults_are_the_models(path: tuple[str, ...]) -> None:
    """The help shows, and a command uses, the models' defaults (no second home)."""
    params = _params(*path)
    for opt, field in LINK_FIELDS.items():
        if opt in params:
            want = _model_default(LinkCondition, field)
            assert params[opt].default == want, (path, opt)
    assert parse_rate(params["rate"].default) == _model_default(LinkCondition, "rate_mbit")
    for name in CELL_FIELDS:
        if name in params and not (path == ("link", "check") and name == "cc"):
            assert params[name].default == _model_default(CellConfig, name), (path, name)
    seconds = params["receipt_tcp_seconds" if path == ("cell",) else "tcp_seconds"].default
    assert seconds == _model_default(SweepSpec, "receipt_tcp_seconds")


def test_cell_arms_default_and_cell_built_from_defaults() -> None:
    params = _params("cell")
    assert params["arms"].default == ",".join(_model_default(CellConfig, "arms"))
    from quicbed.cli.options import CellOptions

    cond = LinkOptions(rate="10", rtt=36).condition()
    assert CellOptions().config(cond, "5kb") == make_cell(condition=cond, page="5kb")


def test_spec_defaults_are_the_models() -> None:
    d = Defaults()
    for name in ("runs", "warmup", "order", "order_seed", "cc", "load_timeout_s"):
        assert getattr(d, name) == _model_default(CellConfig, name), name
    assert tuple(d.arms) == _model_default(CellConfig, "arms")
    assert d.seed == _model_default(LinkCondition, "seed")
    assert d.count == _model_default(LinkCondition, "count")
    assert SweepSpec.model_fields["shaper"].default == _model_default(CellConfig, "shaper")


def test_every_testbed_command_has_the_same_testbed_options() -> None:
    """The five testbed options come from one group, with one help text each."""
    paths = [
        ("cell",),
        ("run",),
        ("link", "check"),
        ("testbed", "up"),
        ("testbed", "down"),
        ("testbed", "status"),
    ]
    seen: dict[str, set[str]] = {}
    for path in paths:
        params = _params(*path)
        for name in TESTBED:
            assert name in params, (path, name)
            seen.setdefault(name, set()).add(params[name].opts[0])
    assert {k: v.pop() for k, v in seen.items()} == {
        "prefix": "--prefix",
        "kind": "--testbed",
        "hosts": "--hosts",
        "ssh_user": "--ssh-user",
        "ssh_key": "--ssh-key",
    }


def test_testbed_options_refuse_ssh_flags_locally() -> None:
    with pytest.raises(QuicbedError, match="go with --testbed ssh"):
        TestbedOptions(ssh_user="me").open("x")
    with pytest.raises(QuicbedError, match="needs --hosts"):
        TestbedOptions(kind="ssh").open("x")
    with pytest.raises(QuicbedError, match="unknown 'emulab'"):
        TestbedOptions(kind="emulab").open("x")


def _scenario_rate(value: object) -> float | None:
    return Scenario(rate=[value], rtt=[36], pages=["5kb"]).rate[0]


@pytest.mark.parametrize("word", [*UNLIMITED, "Unlimited", " UNLIMITED "])
def test_unlimited_is_one_spelling_everywhere(word: str) -> None:
    assert parse_rate(word) is None
    assert LinkOptions(rate=word).condition().rate_mbit is None
    assert _scenario_rate(word) is None
    assert _scenario_rate(None) is None  # a spec's null, as a stored spec writes it


def test_rates_read_alike() -> None:
    for v, want in (("10", 10.0), (10, 10.0), ("0.5", 0.5)):
        assert parse_rate(v) == want
        assert _scenario_rate(v) == want
    for bad in ("abc", "", True):
        with pytest.raises(QuicbedError, match="not a number of Mbit/s or 'unlimited'"):
            parse_rate(bad)
    with pytest.raises(QuicbedError, match="rate: not a number"):
        LinkOptions(rate="abc").condition()


def test_a_scenario_zero_is_not_the_default() -> None:
    """spec.py uses ``is None``: a scenario's runs 0 is refused, not read as 20."""
    spec = SweepSpec(
        name="t", scenarios={"a": Scenario(rate=[10], rtt=[36], pages=["5kb"], runs=0)}
    )
    with pytest.raises(QuicbedError, match=r"scenarios.a: cell: runs: .* \(got 0\)"):
        plan(spec)


def _store_with(folder: Path, *rates: float | None) -> dict[float | None, str]:
    from quicbed.results.store import Store

    store = Store(folder, create=True)
    ids = {}
    for rate in rates:
        kw = {} if rate is None else {"rate_mbit": rate}
        cfg = make_cell(condition=make_condition(rtt_ms=36, **kw), page="5kb")
        store.add_cell(cfg.cell_id(), cfg.model_dump(mode="json"))
        ids[rate] = cfg.cell_id()
    store.close()
    return ids


def test_where_rate_unlimited_matches_unlimited_cells(tmp_path: Path) -> None:
    from quicbed.analysis.select import find_cell
    from quicbed.results.store import Store

    ids = _store_with(tmp_path / "r", None, 10.0)
    store = Store(tmp_path / "r")
    try:
        for word in UNLIMITED:
            assert find_cell(store, cell_id=None, where=f"rate={word},rtt=36") == ids[None]
        assert find_cell(store, cell_id=None, where="rate=10") == ids[10.0]
        assert find_cell(store, cell_id=None, where="rate=10.0,page=5kb") == ids[10.0]
        with pytest.raises(QuicbedError, match="no cell matches"):
            find_cell(store, cell_id=None, where="rate=50")
        with pytest.raises(QuicbedError, match="--where: rate: not a number"):
            find_cell(store, cell_id=None, where="rate=fast")
    finally:
        store.close()
