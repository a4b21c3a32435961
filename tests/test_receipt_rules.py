"""The receipt's judgement rules, from numbers measured on this testbed: what a
correct link must deliver, so that a correct link passes and a wrong one does not."""

from __future__ import annotations

import pytest

from quicbed.link.receipt import _loss_check, tcp_omit_seconds, udp_delivery
from quicbed.model.link import make_condition
from quicbed.shapers.dummynet import DummynetShaper
from quicbed.shapers.netem import NetemShaper
from quicbed.shapers.userspace import UserspaceShaper


def test_seeded_loss_samples_of_a_correct_link_pass_and_a_wrong_loss_fails() -> None:
    # seed 1's drops of 20,000 probes, measured by the beta study's receipts at 100 Mbit/s
    assert _loss_check("down", 0.01, {"sent": 20000, "lost": 167}).passed
    assert _loss_check("down", 0.02, {"sent": 20000, "lost": 360}).passed
    # a quarter too much loss, or none at all, is still caught
    assert not _loss_check("down", 0.01, {"sent": 20000, "lost": 250}).passed
    assert not _loss_check("down", 0.01, {"sent": 20000, "lost": 0}).passed
    assert not _loss_check("down", 0.01, {"sent": 0, "lost": 0}).passed


def test_udp_delivery_follows_where_the_loss_is_drawn() -> None:
    link, sent = 100e6, 120e6
    # at the queue's entry (Dummynet, quicbed-linkem): survivors still fill the link
    assert udp_delivery(link, sent, 0.05, before_queue=True) == pytest.approx(100e6)
    assert udp_delivery(link, sent, 0.20, before_queue=True) == pytest.approx(96e6)
    # after the rate (netem under tbf): the link's rate thinned by the loss
    assert udp_delivery(link, sent, 0.05, before_queue=False) == pytest.approx(95e6)
    assert UserspaceShaper.loss_before_queue and DummynetShaper.loss_before_queue
    assert not NetemShaper.loss_before_queue


def test_tcp_steady_goodput_waits_out_slow_start() -> None:
    """The TCP check measures after slow start: 1 s where that covers it, longer on long
    fat paths. At 100 Mbit/s and 400 ms, 2 s left out gave 82 of the 93 Mbit/s needed
    on a correct link (the beta study's receipts); 4.6 s gave 95.6. At 10 Mbit/s and
    112 ms the formula's 0.7 s read 82-91 % on a correct link, the floor's 1 s 99.9 %
    (docs/benchmarks/tcp-omit.md)."""
    assert tcp_omit_seconds(make_condition(rate_mbit=10, rtt_ms=36)) == 1.0
    assert tcp_omit_seconds(make_condition(rate_mbit=10, rtt_ms=112)) == 1.0
    assert tcp_omit_seconds(make_condition(rate_mbit=100, rtt_ms=112)) == 1.1
    assert tcp_omit_seconds(make_condition(rate_mbit=100, rtt_ms=200)) == 2.1
    assert tcp_omit_seconds(make_condition(rate_mbit=100, rtt_ms=400)) == 4.6
    assert tcp_omit_seconds(make_condition(rate_mbit=None, rtt_ms=400)) == 1.0
