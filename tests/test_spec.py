"""Sweep specs: every validation path, the expansion, and the folder rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.run.sweep import check_budget, prepare_folder
from quicbed.spec.sweepspec import estimate_seconds, load_spec, loss_bound_mbit, plan

ROOT = Path(__file__).resolve().parent.parent
GOOD = """
format: 1
name: t
scenarios:
  base:
    rate: [10, 50]
    rtt: [36]
    pages: [5kb, 1mb]
"""


def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_presets_load_and_expand() -> None:
    demo = load_spec(ROOT / "sweeps" / "demo.yaml")
    assert len(plan(demo)) == 6
    ll = plan(load_spec(ROOT / "sweeps" / "long-look.yaml"))
    assert len(ll) == 4 * 3 * 13
    loss = [pc for pc in ll if pc.scenario == "loss"]
    assert all(pc.config.condition.loss_down() == pytest.approx(0.005) for pc in loss)
    reo = [pc for pc in ll if pc.scenario == "reordering"]
    # the study's jitter: 50 ms the whole range, re-drawn every 100 ms (issue 26)
    assert {pc.config.condition.jitter_kind.value for pc in reo} == {"step"}
    assert {pc.config.condition.jitter_interval_ms for pc in reo} == {100.0}


def test_a_scenarios_jitter_interval(tmp_path: Path) -> None:
    """Unset, it changes no digest and no cell; set, it reaches the jittered cells only,
    and a step jitter it cannot hold is refused by name."""
    base = load_spec(_spec(tmp_path, GOOD))
    jit = GOOD + "    jitter: [0, 30]\n    jitter_kind: step\n"
    unset = load_spec(_spec(tmp_path, jit))
    assert "jitter_interval" not in unset.model_dump_json(exclude_none=True)
    assert base.digest() != unset.digest()
    set_ = load_spec(_spec(tmp_path, jit + "    jitter_interval: 50\n"))
    assert set_.digest() != unset.digest()
    conds = [pc.config.condition for pc in plan(set_)]
    assert {(c.jitter_ms, c.jitter_interval_ms) for c in conds} == {(0, 100.0), (30, 50.0)}
    with pytest.raises(QuicbedError, match="needs a jitter interval of at least 30 ms"):
        plan(load_spec(_spec(tmp_path, jit + "    jitter_interval: 20\n")))


def test_expansion_is_stable(tmp_path: Path) -> None:
    a = [pc.config.cell_id() for pc in plan(load_spec(_spec(tmp_path, GOOD)))]
    b = [pc.config.cell_id() for pc in plan(load_spec(_spec(tmp_path, GOOD)))]
    assert a == b and len(set(a)) == 4


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (("    pages: [5kb, 1mb]", "    pages: [5kb, 1mb]\n    colour: red"), "colour"),
        (("rate: [10, 50]", "rate: []"), "scenarios.base.rate: is empty"),
        (("pages: [5kb, 1mb]", "pages: [5kb, 7kb]"), "unknown page '7kb'"),
        (("name: t", "name: t\ndefaults: {runs: 1}"), "runs must be >= 2 for a variance (got 1)"),
        (("rate: [10, 50]", "rate: [10, -5]"), "rate must be > 0 Mbit/s (got -5)"),
        (("name: t", "name: t\nstatistics: {alpha: 2}"), "statistics.alpha"),
        (("name: t", "name: t\nstatistics: {correction: bonferroni}"), "'bonferroni'"),
        (("format: 1", "format: 9"), "format 9 is not supported"),
        (("name: t", "name: t\ntestbed: emulab"), "'emulab'"),
    ],
)
def test_bad_specs_name_key_and_value(tmp_path: Path, edit: tuple[str, str], needle: str) -> None:
    text = GOOD.replace(*edit)
    assert text != GOOD
    with pytest.raises(QuicbedError) as exc:
        load_spec(_spec(tmp_path, text))
    assert needle in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(QuicbedError, match="not YAML"):
        load_spec(_spec(tmp_path, "a: [1,"))
    with pytest.raises(QuicbedError, match="No such file"):
        load_spec(tmp_path / "none.yaml")


def test_folder_rules(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, GOOD))
    out = tmp_path / "res"
    prepare_folder(out, spec, resume=False, force=False)
    with pytest.raises(QuicbedError, match="holds sweep 't' already; use --resume"):
        prepare_folder(out, spec, resume=False, force=False)
    prepare_folder(out, spec, resume=True, force=False)
    other = load_spec(_spec(tmp_path, GOOD.replace("[10, 50]", "[10]")))
    with pytest.raises(QuicbedError, match="holds another spec"):
        prepare_folder(out, other, resume=True, force=False)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("x")
    with pytest.raises(QuicbedError, match="not empty and holds no quicbed sweep"):
        prepare_folder(junk, spec, resume=False, force=False)


def test_time_budget_needs_yes() -> None:
    spec = load_spec(ROOT / "sweeps" / "long-look.yaml")
    cells = plan(spec)
    with pytest.raises(QuicbedError, match=r"about \d+\.\d h \(156 cells\).*--yes"):
        check_budget(cells, spec.receipt_tcp_seconds, 1, yes=False)
    assert check_budget(cells, spec.receipt_tcp_seconds, 1, yes=True) > 3600


def test_stack_presets_plan_with_their_arms() -> None:
    """sweeps/cc.yaml and quic-stacks.yaml: the arms, CCs and pairs they promise."""
    cc = plan(load_spec(ROOT / "sweeps" / "cc.yaml"))
    bbr = [pc.config for pc in cc if pc.scenario.endswith("-bbr")]
    assert bbr and all(c.tcp_cc() == "bbr" for c in bbr)
    assert all([a.cc for a in c.resolved_arms()] == ["bbr", "bbr"] for c in bbr)
    cubic = [pc.config for pc in cc if pc.scenario.endswith("-cubic")]
    assert all(
        [a.stack for a in c.resolved_arms()] == ["apache", "quic-go", "quiche"] for c in cubic
    )
    stacks = plan(load_spec(ROOT / "sweeps" / "quic-stacks.yaml"))
    arms = stacks[0].config.resolved_arms()
    assert [(a.name, a.stack, a.params) for a in arms] == [
        ("h2", "apache", {}),
        ("h3", "quic-go", {}),
        ("h3-n2", "quic-go", {"cubic_n": 2}),
        ("h3-quiche", "quiche", {}),
    ]
    assert len({a.port for a in arms if a.transport == "udp"}) == 3  # one socket each


def test_old_specs_keep_their_digest(tmp_path: Path) -> None:
    """Keys added with arms as stacks are left out of the digest while unset: a results
    folder made before them still belongs to its spec (--resume works), and every cell
    keeps its ID (values computed by quicbed at 531f610, before arms were stacks)."""
    spec = load_spec(ROOT / "sweeps" / "demo.yaml")
    assert spec.digest() == "435400e99837d472"  # as computed by quicbed 531f610
    # long-look was re-keyed on purpose twice (issue 26): its reordering scenario runs the
    # study's step jitter (0285b598d5a2 was one of its cells), and its QUIC arm is the
    # study's QUICHE (h3-envoy). With the arms it had, the other scenarios' cells keep
    # the IDs of 531f610
    # and once more (issue 48): its h3-envoy runs the study's server's windows
    text = (ROOT / "sweeps" / "long-look.yaml").read_text()
    study = text[text.index("  arms:\n    h2:\n") : text.index("  order: alternate")]
    old = _spec(tmp_path, text.replace(study, "  arms: [h2, h3]\n"))
    cells = plan(load_spec(old))
    # and once more on purpose (issue 42): every cell pins its key exchange (x25519 by
    # default); with key_exchange stack, each stack's own choice as before, they keep them
    kept = sorted(
        pc.config.model_copy(update={"key_exchange": "stack"}).cell_id()
        for pc in cells
        if pc.scenario != "reordering"
    )
    assert kept[:2] == ["037199705192", "04de21ca82ab"]
    assert not {pc.config.cell_id() for pc in cells} & set(kept)


def test_too_few_runs_for_mann_whitney_is_refused() -> None:
    """Mann-Whitney U from 5 valid runs per arm (runs 6: 80 % of 6 is 5) can reach
    p = 0.0079 at best, below 0.01; from 4 (runs 5) only 0.029: such a spec could never
    show a significant cell, so it is refused naming the scenario, not run."""
    from quicbed.spec.sweepspec import SweepSpec

    def spec(runs: int, test: str) -> dict:
        return {
            "name": "s",
            "statistics": {"test": test},
            "scenarios": {"few": {"rate": [10], "rtt": [36], "pages": ["5kb"], "runs": runs}},
        }

    SweepSpec(**spec(6, "mannwhitney"))
    SweepSpec(**spec(2, "welch"))
    with pytest.raises(ValueError, match=r"scenario 'few': runs 5 is too few for mannwhitney"):
        SweepSpec(**spec(5, "mannwhitney"))


#: wall seconds per cell of sweeps/beta.yaml's delay group as measured here (2026-11-24,
#: 20 runs per arm + 1 warm-up, the 3.3 MB page; a receipt each), by (RTT ms, loss %)
BETA_DELAY_MEASURED = {
    (5, 0.2): 50,
    (5, 5): 101,
    (10, 0.2): 55,
    (10, 5): 154,
    (200, 0.2): 223,
    (200, 1): 715,
    (200, 2): 1086,
}


def test_the_estimate_errs_long_on_lossy_long_paths() -> None:
    """The plan's estimate (and so --max-hours) once priced the beta study's delay group
    at 63 minutes; its cells at 200 ms took 4 to 18 minutes each, because downlink loss,
    not the rate, sets a download's pace there. Now each cell's estimate is at least what
    it took and within about 4x of it."""
    spec = load_spec(Path("sweeps/beta.yaml"))
    cells = {
        (pc.config.condition.rtt_ms, pc.config.condition.loss_down_pct): pc
        for pc in plan(spec)
        if pc.scenario == "delay"
    }
    for key, took in BETA_DELAY_MEASURED.items():
        est = estimate_seconds([cells[key]], spec.receipt_tcp_seconds)
        assert took <= est <= 4 * took, (key, est, took)
    # the bound itself: the link's rate without loss, Mathis' rate with it
    lossless = cells[(5, 0.2)].config.condition.model_copy(update={"loss_down_pct": 0.0})
    assert loss_bound_mbit(lossless) == 100.0
    assert loss_bound_mbit(cells[(200, 2)].config.condition) == pytest.approx(0.4997, rel=1e-3)


@pytest.mark.slow
def test_a_resume_prices_only_the_cells_still_to_measure(tmp_path: Path) -> None:
    """``run --resume`` estimates (and asks --yes for) the cells it will measure, not
    the whole plan: the beta sweep's resume announced 514 min for 5 cells left of 20."""
    import subprocess
    import sys

    from quicbed.results.store import Store

    spec_file = _spec(tmp_path, GOOD)
    spec = load_spec(spec_file)
    out = tmp_path / "res"
    prepare_folder(out, spec, resume=False, force=False)
    cells = plan(spec)
    store = Store(out, create=True)
    for pc in cells[1:]:  # all but the first measured before (one failed: kept too)
        cid = pc.config.cell_id()
        store.add_cell(cid, pc.config.model_dump(mode="json"))
        att = store.new_attempt(cid, {"quicbed": "test"})
        store.finish_attempt(cid, att, "done" if pc is not cells[-1] else "failed")
    store.close()
    run = [sys.executable, "-m", "quicbed", "run", str(spec_file), "--out", str(out)]
    cp = subprocess.run(
        [*run, "--resume", "--max-hours", "0.0001"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert cp.returncode == 2 and "h (1 cell), more than --max-hours" in cp.stderr, cp.stderr
    # --retry-failed measures the failed cell again: two cells to price
    cp = subprocess.run(
        [*run, "--resume", "--retry-failed", "--max-hours", "0.0001"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert cp.returncode == 2 and "h (2 cells), more than --max-hours" in cp.stderr, cp.stderr
    cp = subprocess.run(
        [*run, "--retry-failed"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert cp.returncode == 2 and "--retry-failed" in cp.stderr and "--resume" in cp.stderr
    assert cp.stderr.count("\n") == 1, cp.stderr
