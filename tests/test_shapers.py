"""Shaper command generation (netem, dummynet) and the emulator's config contract."""

from __future__ import annotations

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.shapers import get_shaper
from quicbed.shapers.dummynet import DummynetShaper
from quicbed.shapers.netem import NetemShaper
from quicbed.shapers.userspace import UserspaceShaper


def test_dummynet_lines_for_the_reference_loss_scenario() -> None:
    c = make_condition(rate_mbit=50, rtt_ms=36, loss_pct=1)
    lines = DummynetShaper.commands(c, {"down": 110, "up": 120})
    q = -(-2 * int(50e6 * 0.036 / 8) // 1024)
    assert lines == [
        f"ipfw pipe 110 config bw 50Mbit/s delay 18 plr 0.005 queue {q}Kbytes",
        f"ipfw pipe 120 config bw 50Mbit/s delay 18 plr 0.005 queue {q}Kbytes",
    ]


def test_dummynet_packet_queue_and_unlimited_rate() -> None:
    assert DummynetShaper.commands(
        make_condition(rate_mbit=10, rtt_ms=112, queue="100pkts"), {"down": 1, "up": 2}
    ) == [
        "ipfw pipe 1 config bw 10Mbit/s delay 56 queue 100",
        "ipfw pipe 2 config bw 10Mbit/s delay 56 queue 100",
    ]
    assert DummynetShaper.commands(make_condition(rtt_ms=2), {"down": 1, "up": 2})[0] == (
        "ipfw pipe 1 config bw 0 delay 1"
    )


def test_dummynet_jitter_is_split_between_bridge_and_endpoint_netem() -> None:
    """D +/- J: Dummynet delays D - J, netem on the sender J +/- J (the study's way)."""
    c = make_condition(rate_mbit=50, rtt_ms=112, jitter_ms=50, jitter_kind="reorder")
    lines = DummynetShaper.commands(c, {"down": 1, "up": 2})
    assert [x.split(" delay ")[1].split()[0] for x in lines] == ["6", "6"]
    tc = DummynetShaper.jitter_commands(c, {"server": "eno2", "client": "eno3"})
    assert tc["server"] == [
        "tc",
        "qdisc",
        "replace",
        "dev",
        "eno2",
        "root",
        "netem",
        "limit",
        "100000",
        "delay",
        "50000us",
        "50000us",
    ]
    assert tc["client"][4] == "eno3"
    # a jitter larger than the delay: nothing left for Dummynet, netem clamps at zero
    small = make_condition(rtt_ms=36, jitter_ms=25, jitter_kind="reorder")
    assert " delay 0" in DummynetShaper.commands(small, {"down": 1, "up": 2})[0]
    assert DummynetShaper.jitter_commands(small, {"server": "a", "client": "b"})["server"][-2:] == [
        "18000us",
        "25000us",
    ]
    assert DummynetShaper.jitter_commands(make_condition(rtt_ms=36), {"server": "a"}) == {}


@pytest.mark.parametrize(
    ("cond", "needle"),
    [
        (
            make_condition(rtt_ms=112, jitter_ms=50, jitter_kind="smooth"),
            "cannot keep packet order",
        ),
        (make_condition(rtt_ms=3), "1 ms granularity"),
        (make_condition(rtt_ms=112, jitter_ms=0.5, jitter_kind="reorder"), "1 ms granularity"),
        (
            make_condition(rtt_ms=112, jitter_ms=50, jitter_kind="step"),
            "does not apply jitter kind 'step'",
        ),
    ],
)
def test_dummynet_refuses_what_it_cannot_do(cond, needle: str) -> None:
    with pytest.raises(QuicbedError, match=needle):
        DummynetShaper.commands(cond, {"down": 1, "up": 2})
    with pytest.raises(QuicbedError, match=needle):  # what a cell asks before it starts
        DummynetShaper().check(cond)


def test_dummynet_needs_both_pipe_numbers() -> None:
    with pytest.raises(QuicbedError, match="no pipe number"):
        DummynetShaper.commands(make_condition(rtt_ms=2), {"down": 1})


def test_netem_commands_shape_each_egress_port() -> None:
    c = make_condition(rate_mbit=10, rtt_ms=36, loss_pct=1)
    cmds = [" ".join(x) for x in NetemShaper.commands(c)]
    assert len(cmds) == 4
    assert cmds[0].startswith("tc qdisc replace dev cli root handle 1: tbf rate 10000000bit")
    assert "limit 90000" in cmds[0]
    assert cmds[1].startswith("tc qdisc replace dev cli parent 1:1 handle 10: netem")
    assert "delay 18000us" in cmds[1] and "loss 0.5%" in cmds[1]
    assert " dev srv " in cmds[2]


def test_netem_refuses_smooth_jitter() -> None:
    c = make_condition(rate_mbit=10, rtt_ms=112, jitter_ms=10, jitter_kind="smooth")
    with pytest.raises(QuicbedError, match="smooth"):
        NetemShaper.commands(c)


def test_netem_refuses_step_jitter() -> None:
    c = make_condition(rate_mbit=10, rtt_ms=112, jitter_ms=50, jitter_kind="step")
    with pytest.raises(QuicbedError, match="no re-drawn delay \\(jitter kind 'step'\\)"):
        NetemShaper().check(c)
    NetemShaper().check(make_condition(rate_mbit=10, rtt_ms=112, jitter_kind="step"))  # no jitter


def test_userspace_config_carries_step_jitter_as_the_whole_range() -> None:
    c = make_condition(rate_mbit=10, rtt_ms=112, jitter_ms=50, jitter_kind="step")
    for d in UserspaceShaper.config(c)["directions"].values():
        assert (d["delay_us"], d["jitter_us"], d["jitter_kind"], d["jitter_interval_us"]) == (
            56000,
            50000,
            "step",
            100000,
        )


def test_userspace_config_contract() -> None:
    c = make_condition(rate_mbit=100, rtt_ms=112, jitter_ms=50, jitter_kind="reorder", seed=7)
    cfg = UserspaceShaper.config(c)
    assert cfg["format"] == 1 and cfg["seed"] == 7
    assert (cfg["server_if"], cfg["client_if"]) == ("srv", "cli")
    d = cfg["directions"]["down"]
    assert d == {
        "rate_bps": 100_000_000,
        "delay_us": 56000,
        "jitter_us": 50000,
        "jitter_kind": "reorder",
        "jitter_interval_us": 100000,
        "loss": 0.0,
        "queue_bytes": 2_800_000,
        "queue_packets": 0,
        "count": "ethernet",
    }


class _EmulabBridge:
    """What the shapers ask of an Emulab experiment's roles: a FreeBSD bridge with ipfw
    and its pipes file, no netem, our emulator installed. No Emulab here: a stand-in."""

    kind = "ssh"
    makes_namespaces = False

    def exec(self, role: str, cmd: list[str], check: bool = True) -> object:
        class Done:
            returncode = 0

        return Done()

    def has_file(self, role: str, path: object) -> bool:
        return True

    def name(self, role: str) -> str:
        return role

    prefix = "ssh"

    def on_bridge_host(self, argv: list[str]) -> object:
        class Refused:  # FreeBSD: no `ip netns` to try netem in
            returncode, stdout, stderr = 1, "", "ip: not found"

        return Refused()

    def bin_path(self, role: str, binary: str) -> str:
        return f"/usr/local/bin/{binary}"


def test_auto_skips_a_shaper_that_cannot_emulate_the_condition() -> None:
    """On an Emulab bridge auto takes Dummynet, unless the cell's jitter is a kind only
    our emulator has (the study's step): then the emulator, not a refusal."""
    from quicbed.shapers import get_shaper

    bridge = _EmulabBridge()
    plain = make_condition(rate_mbit=10, rtt_ms=112)
    step = make_condition(rate_mbit=10, rtt_ms=112, jitter_ms=50, jitter_kind="step")
    assert isinstance(get_shaper("auto", bridge, plain), DummynetShaper)  # type: ignore[arg-type]
    assert isinstance(get_shaper("auto", bridge), DummynetShaper)  # type: ignore[arg-type]
    assert isinstance(get_shaper("auto", bridge, step), UserspaceShaper)  # type: ignore[arg-type]
    with pytest.raises(QuicbedError, match="step"):  # asked by name: refused, not swapped
        get_shaper("dummynet", bridge, step).check(step)  # type: ignore[arg-type]


def test_the_shapers_are_found_by_name_and_describe_themselves() -> None:
    """Every module of quicbed/shapers is registered under its name; --shaper's choices,
    help and auto's order come from the classes (issue 44: adding a shaper touches its
    module only)."""
    from quicbed.shapers import help_text, names, shapers

    assert names() == ("auto", "dummynet", "netem", "userspace", "none")
    assert set(shapers()) == {"dummynet", "netem", "userspace", "none"}
    text = help_text()
    for name, cls in shapers().items():
        assert cls.summary and f"{name}: {cls.summary}" in text
    assert "the first of dummynet, netem, userspace" in text
    with pytest.raises(QuicbedError, match="unknown shaper 'tc' \\(one of auto, dummynet"):
        get_shaper("tc", _EmulabBridge())  # type: ignore[arg-type]
