"""Each connection's TLS handshake from a load's capture (quicbed.traces.handshake): the
suite's level-full cell read by the module and, independently, by tshark's own fields;
and the rules a real cell here does not produce (a HelloRetryRequest, a server flight
held by QUIC's anti-amplification limit) on tshark's output shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tshark import fields

from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.run.cell import CellResult, verify_summary
from quicbed.traces.handshake import _packets, derive
from quicbed.traces.hellos import HRR_RANDOM

#: tshark's 16 tab-separated fields of quicbed.traces.handshake._FIELDS, for one packet
COLS = (
    "t",
    "tsrc",
    "tdst",
    "usrc",
    "udst",
    "ulen",
    "lh",
    "types",
    "lens",
    "ks",
    "cs",
    "cl",
    "sa",
    "ext",
    "rnd",
    "rec",
)


def _line(**kw: str) -> str:
    return "\t".join(kw.get(c, "") for c in COLS)


def test_a_hello_retry_is_seen_and_the_second_server_hello_names_the_group() -> None:
    """The ServerHello that carries the HelloRetryRequest random is not the group the
    connection ran; the TLS handshake over TCP."""
    out = "\n".join(
        [
            _line(t="0.000", tsrc="5000", tdst="443", types="1", lens="300", ks="29,4588"),
            _line(t="0.040", tsrc="443", tdst="5000", types="2", lens="88", rnd=HRR_RANDOM.hex()),
            _line(t="0.041", tsrc="5000", tdst="443", types="1", lens="320", ks="23"),
            _line(
                t="0.080",
                tsrc="443",
                tdst="5000",
                types="2,8,11,15,20",
                lens="120,10,700,74,32",
                ks="23",
                cs="0x1302",
                cl="380,334",
                sa="0x0403",
                ext="43,51,16",
                rnd="ab" * 32,
            ),
            _line(t="0.121", tsrc="5000", tdst="443", types="20", lens="32"),
        ]
    )
    (h,) = derive(_packets(out), {443}, rtt_ms=40)
    assert (h.transport, h.client_port, h.server_port) == ("tcp", 5000, 443)
    assert h.hello_retry and h.group == 23 and h.group_name == "secp256r1"
    assert h.offered_key_shares == [29, 4588]  # the first ClientHello's
    assert h.cipher_name == "TLS_AES_256_GCM_SHA384" and h.resumed is False
    assert (h.certificates, h.certificate_bytes, h.signature_algorithm) == (2, 714, 0x0403)
    assert h.server_flight_bytes == 120 + 10 + 700 + 74 + 32  # the retry's hello is not in it
    assert h.span_ms == 121.0 and h.round_trips == 3.0
    assert h.amplification_held is None  # TCP: no such limit
    assert h.client_continued is True  # its Finished


def test_a_tcp_connection_the_client_left_before_its_finished_is_told_apart() -> None:
    """Two connections whose server flights were not decrypted (no keys): one the
    client went on with (an encrypted record after the server's hello: its keys are
    missing, named by the chain check), one it raced and dropped without a word after
    the server's hello (it never read the chain: not judged)."""
    from quicbed.settings import certificate

    out = "\n".join(
        [
            _line(t="0.000", tsrc="5001", tdst="443", types="1", lens="300", ks="29"),
            _line(t="0.001", tsrc="5002", tdst="443", types="1", lens="300", ks="29"),
            _line(t="0.040", tsrc="443", tdst="5001", types="2", lens="88", cs="0x1301", rec="22"),
            _line(t="0.040", tsrc="443", tdst="5002", types="2", lens="88", cs="0x1301", rec="22"),
            _line(t="0.041", tsrc="443", tdst="5001", rec="23,23"),
            _line(t="0.041", tsrc="443", tdst="5002", rec="23,23"),
            _line(t="0.080", tsrc="5001", tdst="443", rec="20,23"),
        ]
    )
    went, left = derive(_packets(out), {443}, rtt_ms=40)
    assert (went.client_port, went.client_continued, went.certificates) == (5001, True, None)
    assert (left.client_port, left.client_continued, left.certificates) == (5002, False, None)
    got = certificate.wire_problems("ecdsa-p256/2", [500, 450], [went.as_dict(), left.as_dict()])
    assert got == ["port 5001: its Certificate message was not decrypted"]


def test_a_quic_flight_over_three_times_the_clients_bytes_was_held() -> None:
    """RFC 9000 8.1: 1200 bytes from the client allow 3600 before its address is
    validated; a 5000-byte flight cannot have left at once. GREASE key shares are left
    out of what the client offered."""

    def conn(port: str, flight: list[str], done: str) -> list[str]:
        """A client Initial (1200 bytes of UDP payload), the server's datagrams, then its
        last one completing ServerHello, EncryptedExtensions and Finished."""
        return [
            _line(t="0", usrc=port, udst="443", ulen="1208", lh="0", types="1", lens="500"),
            *(_line(t=done, usrc="443", udst=port, ulen=n, lh="0") for n in flight),
            _line(
                t=done, usrc="443", udst=port, ulen="108", lh="2", types="2,8,20", lens="90,10,32"
            ),
        ]

    out = "\n".join([*conn("6000", ["1208"], "0.05"), *conn("7000", ["1258"] * 4, "0.09")])
    held = {h.client_port: h for h in derive(_packets(out), {443}, rtt_ms=0)}
    assert held[6000].client_first_bytes == 1200
    assert held[6000].server_flight_udp_bytes == 1200 + 100
    assert held[6000].amplification_held is False
    assert held[7000].server_flight_udp_bytes == 4 * 1250 + 100
    assert held[7000].amplification_held is True
    assert held[7000].round_trips is None  # no delay on the link: no RTT to count in


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_every_load_of_a_full_cell_records_its_handshakes(cell_1mb_full: dict[str, Any]) -> None:
    """h2 (Apache, OpenSSL 3.0) and h3 (quic-go) in Chromium: the group each ServerHello
    chose, as tshark's own field shows it and as the load's hello capture read it; the
    warm-up's fresh handshake with the test CA's chain, the measured loads resumed; the
    arm summary names each arm's groups."""
    out: Path = cell_1mb_full["out"]
    r: CellResult = cell_1mb_full["result"]
    runs: list[RunRow] = cell_1mb_full["runs"]
    store = Store.open_readonly(out)
    chain = (store.attempt(r.cell_id, r.attempt).provenance or {})["certificate"]
    store.close()
    assert chain["setting"] == "ecdsa-p256/2" and chain["certificates"] == 2, chain
    for run in runs:
        hs = run.detail["handshake"]
        assert "error" not in hs, hs
        first = hs["first"]
        # the cell pins x25519 (the default) on both arms: every connection ran it, as
        # the capture read by tshark and the load's hello capture read in-process agree
        assert hs["groups"] == ["x25519"], hs
        hellos = {h["client_port"]: h for h in run.detail["server"]["tls_hellos"]}
        for conn in hs["all"]:
            seen = hellos[conn["client_port"]]
            assert seen["group"] == conn["group"] and seen["hello_retry"] == conn["hello_retry"]
            assert seen["resumed"] == conn["resumed"], (seen, conn)
            assert seen["client_hello_bytes"] == conn["client_hello_bytes"], (seen, conn)
        folder = out / run.detail["traces"]["dir"]
        keys = folder.parent / f"{run.arm}-keys.log"
        cap = folder / "capture.pcap.gz"
        # tshark's own reading of the ServerHellos and the first ClientHello
        chosen = fields(
            cap, keys, "tls.handshake.type == 2", "tls.handshake.extensions_key_share_group"
        )
        assert first["group"] == int(chosen[0].split(",")[0]), (run.arm, chosen)
        hello = fields(cap, keys, "tls.handshake.type == 1", "tls.handshake.length")
        assert first["client_hello_bytes"] == int(hello[0].split(",")[0])
        assert first["transport"] == ("tcp" if run.arm == "h2" else "quic")
        assert first["decrypted"] and first["server_flight_bytes"] > 0
        assert 0.8 <= first["round_trips"] <= 3, first  # 36 ms: one round trip and change
        if run.warmup:  # a fresh handshake: the default chain (leaf, root), ECDSA-signed
            assert first["resumed"] is False and first["certificates"] == 2, first
            assert first["certificate_bytes"] == sum(chain["der_bytes"]), (first, chain)
            assert first["signature_algorithm"] == 0x0403, first
        elif run.valid:  # measured: resumed (TLS ticket, 0-RTT for h3): no chain sent
            assert first["resumed"] is True and first["certificates"] == 0, first
        assert hs["chain_problems"] == [], hs
        if first["transport"] == "quic":
            assert first["client_first_bytes"] >= 1200, first  # a padded Initial at least
            assert first["amplification_held"] is False, first
    summary = verify_summary(runs)
    assert summary["h2"]["groups"] == summary["h3"]["groups"] == ["x25519"], summary
    for v in summary.values():  # every measured load's chains counted, none another's
        assert v["chains_counted"] == v["measured"] and v["chain_problems"] == 0, v
    # quicbed export --table handshakes: a row per connection, both readings joined
    from quicbed.results import handshakes

    table = [x for x in handshakes.rows(out) if x["cell_id"] == r.cell_id]
    assert len(table) == sum(len(x.detail["handshake"]["all"]) for x in runs)
    assert {(x["source"], x["key_exchange"], x["group_name"]) for x in table} == {
        ("both", "x25519", "x25519")
    }
    assert all(x["certificates"] == 0 for x in table if x["resumed"])
    print({arm: v["groups"] for arm, v in summary.items()}, r.cell_id)
