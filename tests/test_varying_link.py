"""Time-varying links (issue 41, item 2): the trace and schedule spellings, the bytes a
trace allows between two instants (the arithmetic the emulator's Go model must agree
with), the condition's rules and identity, the shapers that refuse, and a load's proof
on a varying link. The real emulator following a trace under real loads is
tests/test_varying_cell.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.link.loadproof import capacity_facts, judge
from quicbed.model import capacity
from quicbed.model.link import make_condition
from quicbed.shapers import check_condition
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec, plan

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own trace store, so none reads another's traces."""
    store = tmp_path / "traces"
    monkeypatch.setenv("QUICBED_TRACES", str(store))
    return store


def _file(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "the trace is empty"),
        ("\n \n", "the trace is empty"),
        ("0\n0\n", "last offset is 0"),
        ("1\n5\n3\n", "line 3: 3 comes after 5"),
        ("1\nabc\n", "line 2: 'abc' is not a millisecond offset"),
        ("1\n-4\n", "line 2: '-4'"),
        ("1\n2.5\n", "line 2: '2.5'"),
    ],
)
def test_a_bad_trace_file_is_named_by_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    f = _file(tmp_path, "bad.down", text)
    with pytest.raises(QuicbedError) as e:
        capacity.import_files("bad", f, None)
    assert needle in str(e.value) and str(f) in str(e.value)
    assert not (capacity.folder("bad") / capacity.MANIFEST).exists()


def test_an_imported_trace_keeps_its_content_under_its_name(tmp_path: Path) -> None:
    down = _file(tmp_path, "d", "1\n1\n2\n4\n")
    up = _file(tmp_path, "u", "2\n4\n")
    t = capacity.import_files("mine", down, up)
    assert capacity.load("mine").sha256 == t.sha256 and t.up == [2, 4]
    # one MTU packet per line: 4 x 1500 bytes over 4 ms is 12 Mbit/s
    assert t.mean_mbit("down") == pytest.approx(12.0)
    other = _file(tmp_path, "o", "3\n")
    with pytest.raises(QuicbedError, match="stored with other content"):
        capacity.import_files("mine", other, None)
    assert capacity.load("mine").sha256 == t.sha256
    assert capacity.import_files("mine", other, None, force=True).up == [3]
    with pytest.raises(QuicbedError, match="'no/such'"):
        capacity.import_files("no/such", down, None)


def _brute_opportunities(offsets: list[int], p0_us: float, p1_us: float) -> int:
    """Every opportunity's time listed over the repeats, counted in (p0, p1]."""
    period = offsets[-1]
    n = 0
    for cycle in range(int(p1_us / 1000 / period) + 2):
        for v in offsets:
            t = (cycle * period + v) * 1000
            n += p0_us < t <= p1_us
    return n


@pytest.mark.parametrize(
    "window", [(0, 1), (0, 10_000), (3_500, 12_000), (10_000, 10_001), (9_999, 30_000), (7, 7)]
)
def test_the_bytes_a_trace_allows_count_every_repeat(window: tuple[int, int]) -> None:
    offsets = [2, 5, 5, 10]  # two at 5 ms; 10 ms is the period's end, also the next's zero
    p0, p1 = window
    assert capacity.opportunities_between(offsets, p0, p1) == _brute_opportunities(offsets, p0, p1)


def test_the_peak_window_finds_the_burst_across_the_wrap() -> None:
    offsets = [1, 2, 3, 1000] + [1000] * 7  # 7 more at the end: with 1-3 of the next period
    # the 100 ms window around the wrap holds 8 + 3 opportunities
    assert capacity.peak_mbit(offsets) == pytest.approx(11 * 1500 * 8 / 0.1 / 1e6)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("50:-2s", "duration -2000 ms must be in [1,"),
        ("-5:1s", "rate -5 Mbit/s must be 0 (an outage) or in"),
        ("50:0s", "duration 0 ms must be in"),
        ("0:1s,0:2s", "every step is an outage"),
        ("50@-3ms:1s", "RTT -3 ms must be >= 0"),
        ("50", "step '50': not RATE"),
        ("20000:1s", "rate 20000 Mbit/s"),
        ("", "RATE[@RTTms]:DURATION"),
    ],
)
def test_a_bad_schedule_is_named(text: str, needle: str) -> None:
    with pytest.raises(QuicbedError) as e:
        make_condition(schedule=text, rtt_ms=36)
    assert needle in str(e.value)


def test_a_schedule_is_respelled_once_so_its_spellings_are_one_cell() -> None:
    a = make_condition(schedule="50mbit:2000ms, 5@80ms:1s,0:200ms", rtt_ms=36)
    b = make_condition(schedule="50:2s,5@80ms:1s,0:200ms", rtt_ms=36)
    assert a == b and a.schedule == "50:2s,5@80ms:1s,0:200ms"
    cell = {"page": "5kb", "arms": ["h2", "h3"], "runs": 2}
    assert make_cell(condition=a, **cell).cell_id() == make_cell(condition=b, **cell).cell_id()
    c = make_condition(schedule="50:2s,5@80ms:1s,0:300ms", rtt_ms=36)
    assert make_cell(condition=c, **cell).cell_id() != make_cell(condition=a, **cell).cell_id()
    # the time-weighted mean rate sizes the queue: (50 x 2 + 5 x 1) / 3.2 s
    assert a.mean_rate_mbit() == pytest.approx(105 / 3.2)
    assert a.bdp_bytes() == int(105 / 3.2 * 1e6 * 0.036 / 8)


def test_a_schedules_bits_add_up_over_steps_and_repeats() -> None:
    steps = capacity.parse_schedule("10:1s,0:500ms,2:500ms")
    # one period: 10 Mbit + 0 + 1 Mbit
    assert capacity.schedule_bits_between(steps, 0, 2e6) == pytest.approx(11e6)
    # 0.9-1.8 s: 0.1 s at 10, the outage, 0.3 s at 2
    assert capacity.schedule_bits_between(steps, 0.9e6, 1.8e6) == pytest.approx(1e6 + 0.6e6)
    # across the repeat: 1.9-2.1 s is 0.1 s at 2 and 0.1 s at 10
    assert capacity.schedule_bits_between(steps, 1.9e6, 2.1e6) == pytest.approx(0.2e6 + 1e6)


def test_a_schedules_pipes_carry_each_steps_rate_and_one_way_delay() -> None:
    cond = make_condition(schedule="50:2s,5@80ms:1s", rtt_ms=36)
    pipes = cond.pipes()
    assert pipes["down"].rate_bps is None
    assert pipes["down"].capacity == {
        "kind": "schedule",
        "steps": [
            {"duration_us": 2_000_000, "rate_bps": 50_000_000, "delay_us": 18_000},
            {"duration_us": 1_000_000, "rate_bps": 5_000_000, "delay_us": 40_000},
        ],
    }
    config = UserspaceShaper.config(cond)
    assert config["directions"]["up"]["capacity"] == pipes["up"].capacity
    assert config["directions"]["up"]["rate_bps"] == 0


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"rate_mbit": 10}, "the schedule sets the rate (leave the rate unset)"),
        ({"jitter_ms": 5, "jitter_kind": "reorder"}, "a varying link has no jitter"),
        ({"trace": "gen:lte-markov:seed=1"}, "either a trace or a schedule"),
    ],
)
def test_a_schedule_with_what_contradicts_it_is_refused(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(QuicbedError) as e:
        make_condition(schedule="10:1s", rtt_ms=36, **kw)
    assert needle in str(e.value)


def test_a_trace_is_named_by_its_content_and_made_once(_store: Path) -> None:
    cond = make_condition(trace="gen:lte-markov:seed=2:seconds=20", rtt_ms=36)
    made = capacity.load(cond.trace or "")
    assert cond.trace_sha256 == made.sha256
    assert cond.trace_mean_mbit == pytest.approx(made.mean_mbit("down"))
    assert (capacity.folder(cond.trace or "") / "down").is_file()
    # a stored condition is read back without the store
    dump = cond.model_dump(mode="json")
    for p in _store.rglob("*"):
        if p.is_file():
            p.unlink()
    assert make_condition(**dump) == cond
    cell = {"page": "5kb", "arms": ["h2", "h3"], "runs": 2}
    other = make_condition(trace="gen:lte-markov:seed=3:seconds=20", rtt_ms=36)
    assert (
        make_cell(condition=cond, **cell).cell_id() != make_cell(condition=other, **cell).cell_id()
    )
    # a constant link's cell keeps its ID: tests/test_preset_identity.py


def test_an_unknown_trace_or_model_is_named() -> None:
    with pytest.raises(QuicbedError, match="trace 'nosuch' is not in the trace store"):
        make_condition(trace="nosuch", rtt_ms=36)
    with pytest.raises(QuicbedError, match="'tachyon'"):
        make_condition(trace="gen:tachyon:seed=1", rtt_ms=36)
    with pytest.raises(QuicbedError, match="'speed=3'"):
        make_condition(trace="gen:lte-markov:speed=3", rtt_ms=36)


def test_a_trace_changed_after_planning_is_refused_before_the_emulator_starts(
    tmp_path: Path,
) -> None:
    capacity.import_files("t", _file(tmp_path, "a", "1\n2\n"), None)
    cond = make_condition(trace="t", rtt_ms=36)
    assert UserspaceShaper.config(cond)["directions"]["down"]["capacity"]["sha256"] == (
        capacity.load("t").file_sha256("down")
    )
    capacity.import_files("t", _file(tmp_path, "b", "1\n3\n"), None, force=True)
    with pytest.raises(QuicbedError, match="the trace changed since the cell was planned"):
        UserspaceShaper.config(cond)


@pytest.mark.parametrize("shaper", ["netem", "dummynet", "none"])
def test_shapers_that_hold_one_rate_refuse_a_varying_link(shaper: str) -> None:
    cond = make_condition(schedule="10:1s,1:1s", rtt_ms=36, queue="100pkts")
    with pytest.raises(QuicbedError) as e:
        check_condition(shaper, cond)
    assert "10:1s,1:1s" in str(e.value)
    check_condition("userspace", cond)


def test_a_scenario_takes_traces_and_schedules_instead_of_a_rate(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    body = {
        "name": "v",
        "defaults": {"runs": 2, "arms": ["h2", "h3"]},
        "scenarios": {
            "v": {
                "trace": ["gen:lte-markov:seed=1:seconds=20"],
                "schedule": ["10:1s,2:1s"],
                "rtt": [36],
                "pages": ["5kb"],
            }
        },
    }
    spec.write_text(json.dumps(body))
    cells = plan(load_spec(spec))
    assert sorted(c.config.condition.varying() or "" for c in cells) == ["schedule", "trace"]
    for bad, needle in (
        ({"rate": [10]}, "a trace sets the rate (leave rate out)"),
        ({"trace": None, "schedule": None}, "a scenario needs its rate (or a trace or schedule)"),
        ({"trace": []}, "is empty"),
    ):
        sc = {**body["scenarios"]["v"], **bad}  # type: ignore[dict-item]
        spec.write_text(json.dumps({**body, "scenarios": {"v": sc}}))
        with pytest.raises(QuicbedError) as e:
            plan(load_spec(spec))
        assert needle in str(e.value)


def _counters(position_us: int, served: int, restarts: int = 1) -> dict[str, object]:
    cap = {
        "kind": "trace",
        "restarts": restarts,
        "epoch_ns": 0,
        "position_us": position_us,
        "period_us": 10_000,
        "served_bytes": served,
        "describe": "",
    }
    d = {"tx_packets": 0, "loss_drops": 0, "queue_drops": 0, "reordered": 0}
    d |= {"socket_drops": 0, "send_errors": 0, "late_hist": [], "capacity": cap}
    return {"directions": {"down": d, "up": d}}


def test_a_load_is_placed_in_its_trace_and_spoiled_if_the_link_carried_more(
    tmp_path: Path,
) -> None:
    capacity.import_files("t", _file(tmp_path, "a", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"), None)
    cond = make_condition(trace="t", rtt_ms=36)
    facts = capacity_facts(
        cond,
        "down",
        _counters(0, 0)["directions"]["down"],  # type: ignore[arg-type,index]
        _counters(25_000, 30_000)["directions"]["down"],
    )  # type: ignore[index]
    # 25 ms of a trace with one opportunity a ms: 25 x 1500 bytes allowed
    assert facts == {
        "kind": "trace",
        "from_ms": 0.0,
        "to_ms": 25.0,
        "period_ms": 10.0,
        "served_bytes": 30_000,
        "available_bytes": 37_500,
        "used_pct": 80.0,
    }
    ok = judge(cond, _counters(0, 0), _counters(25_000, 30_000), None, 15.0)
    assert not ok.spoiled and ok.facts["directions"]["up"]["capacity"]["used_pct"] == 80.0
    over = judge(cond, _counters(0, 0), _counters(25_000, 40_000), None, 15.0)
    assert over.spoiled and not over.host_spoiled
    assert (
        "carried 40000 bytes down during this load where its trace allows 37500"
        in (over.reasons[0])
    )
    moved = judge(cond, _counters(0, 0), _counters(25_000, 30_000, restarts=2), None, 15.0)
    assert moved.spoiled and "was restarted during this load" in moved.reasons[0]


def test_the_traces_command_imports_shows_and_refuses_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    qb = [sys.executable, "-m", "quicbed", "traces"]
    good = _file(tmp_path, "g", "1\n2\n2\n4\n")
    cp = subprocess.run(
        [*qb, "import", "mine", "--down", str(good)], env=env, capture_output=True, text=True
    )
    assert cp.returncode == 0 and "stored mine" in cp.stdout, cp.stderr
    cp = subprocess.run([*qb, "show", "mine", "--json"], env=env, capture_output=True, text=True)
    assert json.loads(cp.stdout)["down"]["opportunities"] == 4
    empty = _file(tmp_path, "e", "")
    cp = subprocess.run(
        [*qb, "import", "x", "--down", str(empty)], env=env, capture_output=True, text=True
    )
    assert cp.returncode == 2 and "the trace is empty" in cp.stderr
    assert cp.stderr.count("\n") == 1, cp.stderr


def test_a_start_offset_places_every_load_and_is_part_of_the_cell(tmp_path: Path) -> None:
    capacity.import_files("t", _file(tmp_path, "a", "1\n2\n3\n4\n"), None)
    at = make_condition(trace="t", rtt_ms=36, start_ms=2.5)
    assert UserspaceShaper.config(at)["directions"]["down"]["capacity"]["start_us"] == 2500
    assert (
        "start_us"
        not in UserspaceShaper.config(make_condition(trace="t", rtt_ms=36))["directions"]["down"][
            "capacity"
        ]
    )
    assert at.rate_label().startswith("trace t from 0.0025 s")
    cell = {"page": "5kb", "arms": ["h2", "h3"], "runs": 2}
    plain = make_condition(trace="t", rtt_ms=36)
    assert make_cell(condition=at, **cell).cell_id() != make_cell(condition=plain, **cell).cell_id()
    sched = make_condition(schedule="10:1s", rtt_ms=36, start_ms=400)
    assert sched.pipes()["up"].capacity["start_us"] == 400_000  # type: ignore[index]
    for kw, needle in (
        ({"trace": "t", "start_ms": -1}, "start -1 ms"),
        ({"rate_mbit": 10, "start_ms": 5}, "a start in a trace or schedule needs one"),
    ):
        with pytest.raises(QuicbedError, match=needle):
            make_condition(rtt_ms=36, **kw)


def test_a_package_carries_its_traces_and_a_rerun_installs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = capacity.import_files("mine", _file(tmp_path, "a", "1\n2\n3\n"), None)
    carried = tmp_path / "pkg" / capacity.CARRIED
    gone = "0" * 64
    why = capacity.carry({"mine": mine.sha256, "lost": gone}, carried)
    assert len(why) == 1 and "trace lost" in why[0]
    assert capacity.carry({"mine": gone}, tmp_path / "x")[0].startswith("trace mine: the store")
    # another machine: an empty store gets the trace its cells ran on, once
    monkeypatch.setenv("QUICBED_TRACES", str(tmp_path / "elsewhere"))
    assert capacity.install_carried(carried) == ["mine"]
    assert capacity.load("mine").sha256 == mine.sha256
    assert capacity.install_carried(carried) == []
    # a store holding another trace of that name is refused by name
    monkeypatch.setenv("QUICBED_TRACES", str(tmp_path / "third"))
    capacity.import_files("mine", _file(tmp_path, "b", "5\n"), None)
    with pytest.raises(
        QuicbedError, match=r"trace mine is in the trace store .* set QUICBED_TRACES"
    ):
        capacity.install_carried(carried)


def test_a_background_flows_share_is_of_what_the_trace_allowed_over_the_span() -> None:
    from quicbed.link.varying import span_rate_bps

    sched = make_condition(schedule="20:1s,5:1s", rtt_ms=36)
    epoch = 1_000_000_000_000
    restarted = {"directions": {"down": {"capacity": {"epoch_unix_ns": epoch}}}}
    # 0.2-0.7 s after the restart: all at 20 Mbit/s (the mean is 12.5)
    got = span_rate_bps(sched, restarted, "down", epoch + 200_000_000, epoch + 700_000_000)
    assert got == pytest.approx(20e6)
    # 0.8-1.6 s: 0.2 s at 20 and 0.6 s at 5
    got = span_rate_bps(sched, restarted, "down", epoch + 800_000_000, epoch + 1_600_000_000)
    assert got == pytest.approx((0.2 * 20 + 0.6 * 5) / 0.8 * 1e6)
    # no epoch on this clock (another host): the schedule's mean
    assert span_rate_bps(sched, None, "down", 0, 10**9) == pytest.approx(12.5e6)
    assert span_rate_bps(make_condition(rate_mbit=10, rtt_ms=36), None, "up", 0, 1) == 10e6
    assert span_rate_bps(make_condition(rtt_ms=36), None, "up", 0, 1) is None


def test_a_mahimahi_file_is_stored_under_a_name_of_its_content(tmp_path: Path) -> None:
    _file(tmp_path, "lte.down", "1\n2\n2\n4\n")
    _file(tmp_path, "lte.up", "4\n")
    name = capacity.from_file("lte.down", tmp_path)
    assert name.startswith("lte-") and capacity.load(name).up == [4]
    assert capacity.from_file(str(tmp_path / "lte.down"), Path("/")) == name
    other = _file(tmp_path, "wifi.trace", "3\n")
    both = capacity.load(capacity.from_file("wifi.trace", tmp_path))
    assert both.down == both.up == [3] and both.name.startswith("wifi.trace-")
    other.write_text("5\n")  # another content: another trace, the first one kept
    assert capacity.from_file("wifi.trace", tmp_path) != both.name
    assert capacity.from_file("gen:lte-markov:seed=1", tmp_path) == "gen:lte-markov:seed=1"
    assert capacity.from_file("stored-name", tmp_path) == "stored-name"
    with pytest.raises(QuicbedError, match=r"trace file .*/no/such.down: no such file"):
        capacity.from_file("no/such.down", tmp_path)


def test_a_spec_names_a_trace_file_beside_it(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    _file(tmp_path / "t", "mine.down", "1\n2\n")
    spec = tmp_path / "s.yaml"
    sc = {"trace": ["t/mine.down"], "rtt": [36], "pages": ["5kb"]}
    body = {"name": "v", "defaults": {"runs": 2, "arms": ["h2"]}, "scenarios": {"v": sc}}
    spec.write_text(json.dumps(body))
    (cell,) = plan(load_spec(spec))
    assert cell.config.condition.trace == capacity.from_file("t/mine.down", tmp_path)
    sc["trace"] = ["t/gone.down"]
    spec.write_text(json.dumps(body))
    with pytest.raises(QuicbedError, match=r"scenarios\.v\.trace: trace file .*gone.down"):
        load_spec(spec)
