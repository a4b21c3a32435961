"""Set-up by what is used (issue 46): the base installs what the demo needs, every other
component when asked (`make setup-NAME`). Each plug-in that needs a component declares
it; the playbooks gate its role by that name; a cell that needs a missing one is refused
before anything starts, naming the command that installs it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from quicbed.client import browsers
from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.run.cell import check_installed
from quicbed.servers import stacks
from quicbed.servers.quiche import QuicheServer
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOKS = ROOT / "playbooks"


def _components() -> list[str]:
    found: list[str] = yaml.safe_load((PLAYBOOKS / "group_vars" / "all.yml").read_text())[
        "quicbed_components"
    ]
    return found


def test_every_declared_component_is_a_gated_role_and_every_component_is_declared() -> None:
    declared = {c.component for c in [*stacks().values(), *browsers().values()] if c.component}
    known = set(_components())
    assert declared <= known, declared - known
    plays = (PLAYBOOKS / "site.yml").read_text() + (PLAYBOOKS / "local.yml").read_text()
    gated = set(re.findall(r"'([a-z0-9]+)' in quicbed_with", plays))
    assert gated == known  # each component gates a role, and only they do


def test_make_setup_installs_the_base_and_make_test_everything() -> None:
    make = (ROOT / "Makefile").read_text()
    assert """playbooks/local.yml -e '{"quicbed_with": []}'""" in make  # setup: the base
    assert re.search(r"^setup-%: venv\n\t.*quicbed_with.*\[\"\$\*\"\]", make, re.M)
    assert re.search(r"^test: setup-all lint bytecode$", make, re.M)
    assert re.search(r"^demo: setup bytecode$", make, re.M)


def test_a_cell_whose_stack_is_not_installed_names_its_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quiche server's build missing from build/bin: refused by name before any
    testbed is made (the testbed is never brought up)."""
    monkeypatch.setattr(QuicheServer, "software_name", "quicbed-quiche-server-not-built")
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36), page="5kb", arms=["h2", "h3-quiche"]
    )
    with pytest.raises(QuicbedError) as exc:
        check_installed([cfg], LocalTestbed("qbnone"))
    assert str(exc.value) == (
        "stack quiche: its server (quicbed-quiche-server-not-built) is not installed on "
        "qbnone-server; install it: make setup-quiche"
    )
    check_installed([make_cell(condition=cfg.condition, page="5kb")], LocalTestbed("qbnone"))


@pytest.mark.root
def test_a_sweep_whose_stack_is_not_installed_is_refused_before_its_first_cell(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sweep with an arm on a stack whose server is missing: refused with the same
    words as a cell, once its testbed is open and before any cell; the testbed is taken
    down again and the results folder holds nothing measured."""
    from quicbed.cli.options import SweepTestbedOptions
    from quicbed.cli.runspec import SweepRun, run_spec
    from quicbed.spec.sweepspec import load_spec

    monkeypatch.setattr(QuicheServer, "software_name", "quicbed-quiche-server-not-built")
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(
        "format: 1\nname: t\ndefaults:\n  arms: [h2, h3-quiche]\nscenarios:\n  s:\n"
        "    rate: [10]\n    rtt: [36]\n    pages: [5kb]\n"
    )
    run = SweepRun(
        again="",
        tb=SweepTestbedOptions(prefix="tcmiss"),
        resume=False,
        retry_failed=False,
        force=False,
        yes=True,
        max_hours=1.0,
        keep_testbed=False,
        traces=None,
        shard=None,
    )
    out = tmp_path / "o"
    with pytest.raises(QuicbedError) as exc:
        run_spec(load_spec(spec_file), str(out), run)
    assert str(exc.value) == (
        "stack quiche: its server (quicbed-quiche-server-not-built) is not installed on "
        "tcmiss-server; install it: make setup-quiche"
    )
    assert not list(out.rglob("store.sqlite")) and not LocalTestbed("tcmiss").exists()
