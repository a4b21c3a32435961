"""The host's CPU shares a receipt keeps, and when a failed receipt blames the host."""

from __future__ import annotations

from quicbed.link.hostcpu import FIELDS, blame, parse, sample_here, shares


def _ticks(**kw: int) -> list[int]:
    return [kw.get(f, 0) for f in FIELDS]


def test_shares_are_of_all_the_time_between_two_samples() -> None:
    before = _ticks(user=100, idle=1000, steal=5)
    after = _ticks(user=160, system=20, softirq=20, idle=1180, iowait=10, steal=15)
    got = shares(before, after)
    assert got is not None
    # 60 + 20 + 20 busy, 180 idle, 10 iowait, 10 steal: 300 ticks
    assert got["ticks"] == 300
    assert got["busy_pct"] == round(100 * 100 / 300, 2)
    assert got["iowait_pct"] == round(100 * 10 / 300, 2)
    assert got["steal_pct"] == round(100 * 10 / 300, 2)


def test_no_shares_without_both_samples_or_without_time() -> None:
    t = _ticks(user=1, idle=2)
    assert shares(None, t) is None and shares(t, None) is None
    assert shares(t, t) is None


def test_a_failed_receipt_names_the_host_only_when_it_lost_cpu_to_steal() -> None:
    assert blame(None) == ""
    assert blame({"steal_pct": 0.4, "busy_pct": 90.0}) == ""
    said = blame({"steal_pct": 12.5, "busy_pct": 40.0})
    assert "12.5 % of its CPU time to steal" in said


def test_the_cpu_line_is_parsed_in_fields_order_and_nothing_else_is() -> None:
    line = "cpu  10 1 20 300 4 0 2 7 0 0"
    assert parse(line) == [10, 1, 20, 300, 4, 0, 2, 7]
    assert parse("cpu0 10 1 20 300 4 0 2 7 0 0") is None  # one core's line, not the sum
    assert parse("cpu 1 2 3") is None  # a kernel before steal was counted
    assert parse("") is None


def test_this_machine_is_sampled_from_its_own_proc_stat() -> None:
    got = sample_here()
    assert got is not None and len(got) == len(FIELDS)
    with open("/proc/stat") as f:
        assert parse(f.readline()) is not None
