"""The handshake's knobs in a real cell: the certificate chain (quicbed.settings.certificate:
every server sends the cell's chain, every client trusts that chain alone, and at level
full every fresh handshake's chain is counted from the wire) and the TLS 1.3 cipher suite
(the cell's ``aead``: pinned where a server can, verified per load from the server's own
record, the others named)."""

from __future__ import annotations

import pytest
from conftest import SharedLinks

from quicbed.model.link import make_condition
from quicbed.report.build import cell_rows
from quicbed.results.store import Store
from quicbed.settings import certificate
from quicbed.spec.arms import parse_cli
from quicbed.spec.cellconfig import make_cell

#: the 10 Mbit/s, 36 ms link the other level-full cells share (tests/conftest.py)
COND = make_condition(rate_mbit=10, rtt_ms=36)


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_an_rsa_chain_of_three_and_chacha20_on_every_stack_and_both_browsers(
    shared_links: SharedLinks, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """rsa-2048/3 (leaf, intermediate, root) on Apache, quic-go, quiche and Envoy in
    Chromium (the leaf's SPKI pin) and quic-go in Firefox (the chain's root in its NSS
    database), 1-RTT so every load's handshake sends the chain: tshark reads on the wire,
    for every connection of every load, three certificates of exactly the chain's DER
    bytes and a CertificateVerify signed with RSA-PSS; the attempt records the chain and
    each arm's anchor. The cell's aead chacha20-poly1305 is pinned on Apache and quic-go
    (both browsers), by their own records of every connection and by the ServerHellos the
    hello capture read; quiche and Envoy pin no suite and are left to their own."""
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
        aead="chacha20-poly1305",
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
    chacha = "TLS_CHACHA20_POLY1305_SHA256"
    pinned = {a.name: a.params.get("aead") for a in cfg.resolved_arms()}
    assert pinned == {
        "h2": "chacha20-poly1305",
        "h3": "chacha20-poly1305",
        "h3-quiche": None,
        "h3-envoy": None,
        "h3-ff": "chacha20-poly1305",
    }
    for run in runs:
        server = run.detail["server"]
        suites = {h["cipher"] for h in server.get("tls_hellos") or []}
        if pinned[run.arm]:  # the server's own record, and its ServerHellos
            assert server["tls_cipher"] == [chacha] and suites == {chacha}, (run.arm, server)
        elif run.arm == "h3-quiche":  # BoringSSL's own choice: AES first with AES hardware
            assert suites and chacha not in suites, (run.arm, suites)
    # the report's cell table names each side's groups and the cell's chain
    rows = {row.pair: row for row in cell_rows(out)[0] if row.pair}
    # (h3-ff is in another browser than h2: a cell compares arms of one browser)
    assert set(rows) == {"h2/h3", "h2/h3-quiche", "h2/h3-envoy"}, rows
    for pair, row in rows.items():
        assert row.certificate == "rsa-2048/3" and row.ref_groups == "x25519", (pair, row)
        want = "x25519mlkem768" if pair == "h2/h3-envoy" else "x25519"  # Envoy pins none
        assert row.cand_groups == want, (pair, row.cand_groups)
