"""The certificate setting in a real cell (quicbed.settings.certificate): every server
sends the cell's chain, every client trusts that chain alone, and at level full every
fresh handshake's chain is counted from the wire."""

from __future__ import annotations

import pytest
from conftest import SharedLinks

from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.settings import certificate
from quicbed.spec.arms import parse_cli
from quicbed.spec.cellconfig import make_cell

#: the 10 Mbit/s, 36 ms link the other level-full cells share (tests/conftest.py)
COND = make_condition(rate_mbit=10, rtt_ms=36)


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_an_rsa_chain_of_three_on_every_stack_and_both_browsers(
    shared_links: SharedLinks, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """rsa-2048/3 (leaf, intermediate, root) on Apache, quic-go, quiche and Envoy in
    Chromium (the leaf's SPKI pin) and quic-go in Firefox (the chain's root in its NSS
    database), 1-RTT so every load's handshake sends the chain: tshark reads on the wire,
    for every connection of every load, three certificates of exactly the chain's DER
    bytes and a CertificateVerify signed with RSA-PSS; the attempt records the chain and
    each arm's anchor."""
    names, settings = parse_cli("h2,h3,h3-quiche,h3-envoy,h3-ff:stack=quic-go:browser=firefox")
    cfg = make_cell(
        condition=COND,
        page="5kb",
        runs=2,
        warmup=1,
        mode="1rtt",
        arms=names,
        arm_settings=settings,
        certificate="rsa-2048/3",
    )
    out = tmp_path_factory.mktemp("chain") / "r"
    r = shared_links.run_cell(cfg, out, traces="full")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    store = Store(out)
    chain = (store.attempt(r.cell_id, r.attempt).provenance or {})["certificate"]
    runs = store.runs(r.cell_id, r.attempt)
    store.close()
    assert chain["setting"] == "rsa-2048/3" and chain["certificates"] == 3, chain
    assert chain["trusted_by"] == {
        "h2": "spki pin",
        "h3": "spki pin",
        "h3-quiche": "spki pin",
        "h3-envoy": "spki pin",
        "h3-ff": "root",
    }, chain
    sent = sum(chain["der_bytes"])
    for run in runs:
        shake = run.detail["handshake"]
        assert "error" not in shake and shake["chain_problems"] == [], (run.arm, shake)
        fresh = [h for h in shake["all"] if not h["resumed"]]
        assert fresh, (run.arm, shake)  # 1-RTT: the page's connection is a fresh one
        for h in fresh:
            assert (h["certificates"], h["certificate_bytes"]) == (3, sent), (run.arm, h)
            assert h["signature_algorithm"] in certificate.KEYS["rsa-2048"], (run.arm, h)
    for arm, v in r.verified.items():
        assert v["chains_counted"] == v["measured"] and v["chain_problems"] == 0, (arm, v)
