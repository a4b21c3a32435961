"""The key exchange as a cell setting (quicbed.settings.keyexchange): named or refused by
name, pinned on every arm whose stack can, left to the others with their reason, part
of the cell's identity (``stack`` keeps the IDs of cells made before); and verified per
load from the hellos on the wire, a real cell's loads read by the in-process reader
and, independently, by tshark."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.servers.quic_go import QuicGoServer
from quicbed.settings import keyexchange
from quicbed.spec.arms import ArmSettings, unpinned_arms
from quicbed.spec.cellconfig import make_cell
from quicbed.traces.hellos import hellos

COND = make_condition(rate_mbit=10, rtt_ms=36)


def _cell(**kw: Any) -> Any:
    return make_cell(**{"condition": COND, "page": "5kb", "runs": 2, "warmup": 1} | kw)


def test_names_aliases_and_a_bad_name() -> None:
    assert keyexchange.parse("X25519") == "x25519"
    assert keyexchange.parse("P-256") == keyexchange.parse("p256") == "secp256r1"
    assert keyexchange.parse("x25519mlkem768") == "x25519mlkem768"
    with pytest.raises(ValueError, match=r"'x448' is not a key exchange quicbed pins: one of"):
        keyexchange.parse("x448")
    with pytest.raises(QuicbedError, match=r"cell: key_exchange: 'x448' is not a key exchange"):
        _cell(key_exchange="x448")
    with pytest.raises(QuicbedError, match=r"key_exchange 'ffdhe2048'"):
        _cell(arms=("h2", "h3"), arm_settings={"h3": ArmSettings(key_exchange="ffdhe2048")})


def test_every_arm_that_can_pin_runs_the_cells_group_and_the_others_say_why_not() -> None:
    arms = _cell(arms=("h2", "h3", "h3-quiche", "h3-envoy")).resolved_arms()
    assert {a.name: a.key_exchange for a in arms} == {
        "h2": "x25519",
        "h3": "x25519",
        "h3-quiche": "x25519",
        "h3-envoy": None,
    }
    assert all("key_exchange" not in a.params for a in arms)  # the cell's, not the arm's own
    why = unpinned_arms(arms, "x25519")
    assert list(why) == ["h3-envoy"] and "Envoy's QUIC listener takes no group" in why["h3-envoy"]
    assert "key_exchange" in arms[1].as_dict() and "key_exchange" not in arms[3].as_dict()
    # an arm's own group wins; stack pins nothing anywhere
    own = _cell(
        arms=("h2", "h3", "h3-pq"),
        arm_settings={"h3-pq": ArmSettings(stack="quic-go", key_exchange="x25519mlkem768")},
    ).resolved_arms()
    assert [a.key_exchange for a in own] == ["x25519", "x25519", "x25519mlkem768"]
    assert own[2].describe() == "h3-pq (quic-go, cubic, key_exchange x25519mlkem768)"
    loose = _cell(arms=("h2", "h3"), key_exchange="stack").resolved_arms()
    assert [a.key_exchange for a in loose] == [None, None]
    assert unpinned_arms(loose, "stack") == {}


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        (
            {"key_exchange": "x25519mlkem768"},
            r"key_exchange x25519mlkem768: arm h2's apache cannot pin it: Debian 12's OpenSSL "
            r"3.0 has no ML-KEM",
        ),
        (
            {
                "arms": ("h2", "h3-envoy"),
                "arm_settings": {"h3-envoy": ArmSettings(key_exchange="x25519")},
            },
            r"arm h3-envoy: key_exchange x25519: envoy cannot pin a key exchange",
        ),
        (
            {
                "arms": ("h2", "h3"),
                "arm_settings": {"h2": ArmSettings(tls="1.2", key_exchange="x25519")},
            },
            r"arm h2: key_exchange with tls 1.2: quicbed pins and reads the key exchange of TLS",
        ),
    ],
)
def test_a_group_a_stack_cannot_pin_is_refused_by_name(kw: dict[str, Any], named: str) -> None:
    with pytest.raises(QuicbedError, match=named):
        _cell(**kw).resolved_arms()


def test_a_tls_1_2_arm_is_left_unpinned_with_its_reason() -> None:
    arms = _cell(arms=("h2", "h3"), arm_settings={"h2": ArmSettings(tls="1.2")}).resolved_arms()
    assert [a.key_exchange for a in arms] == [None, "x25519"]
    assert "ServerKeyExchange" in unpinned_arms(arms, "x25519")["h2"]


def test_the_setting_is_in_the_cells_identity_and_stack_keeps_the_old_one() -> None:
    ids = {v: _cell(key_exchange=v).cell_id() for v in ("x25519", "secp256r1", "stack")}
    assert len(set(ids.values())) == 3
    assert _cell().cell_id() == ids["x25519"]  # the default
    # a cell made before the setting ran each stack's own: its stored config has no
    # key_exchange, and hashes as key_exchange stack does
    dump = _cell(key_exchange="stack").model_dump(mode="json")
    dump.pop("key_exchange")
    from quicbed.results.store import stored_config

    assert make_cell(**stored_config(dump)).cell_id() == ids["stack"]


def test_evidence_names_the_group_a_server_chose() -> None:
    x, pq = {"group": 29, "group_name": "x25519"}, {"group": 4588, "group_name": "x25519mlkem768"}
    assert keyexchange.evidence(None, {}) == []
    assert keyexchange.evidence("x25519", {"tls_hellos": [x, x]}) == []
    assert keyexchange.evidence("x25519", {"tls_hellos": [x, pq]}) == [
        "the server chose x25519mlkem768 (its ServerHello), not x25519, the arm's key_exchange"
    ]
    # a retried connection without its second ServerHello says nothing either way
    assert keyexchange.evidence("x25519", {"tls_hellos": [{"group": None}, x]}) == []
    assert "no ServerHello" in keyexchange.evidence("x25519", {"tls_hellos": []})[0]
    assert keyexchange.evidence("x25519", {"tls_hellos_problem": "gone"}) == [
        "the load's hellos were not read: gone"
    ]


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_server_that_ignores_the_pin_gives_invalid_loads_naming_its_group(
    shared_links: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quic-go started without its -groups flag (a server that did not apply the cell's
    setting, which no real server here does on its own) answers Chromium with the hybrid:
    every h3 load is invalid, naming it, while h2 (Apache pinned) is valid."""
    argv = QuicGoServer.argv

    def unpinned(self: QuicGoServer) -> list[str]:
        out = argv(self)
        i = out.index("-groups")
        return out[:i] + out[i + 2 :]

    monkeypatch.setattr(QuicGoServer, "argv", unpinned)
    r = shared_links.run_cell(_cell(arms=("h2", "h3")), tmp_path / "r")
    assert r.status == "failed" and "h3:" in r.problem, r.problem
    from quicbed.results.store import Store

    store = Store.open_readonly(tmp_path / "r")
    try:
        runs = store.runs(r.cell_id, r.attempt)
    finally:
        store.close()
    for run in runs:
        hellos = run.detail["server"]["tls_hellos"]
        assert hellos, run.detail["server"]
        if run.arm == "h3":  # (a TCP ClientHello over two segments: its shares unread)
            assert all(h["offered"] == [4588, 29] for h in hellos), hellos
            assert not run.valid
            assert "the server chose x25519mlkem768 (its ServerHello), not x25519" in run.reason
        else:
            assert {h["group_name"] for h in hellos} == {"x25519"}
            assert run.valid or "x25519" not in run.reason, run.reason


def _pcap(frames: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", 1700000000 + i, 0, len(f), len(f)) + f
    return out


def _segment(
    sport: int, dport: int, payload: bytes, src: str = "0.0.0.0", dst: str = "0.0.0.0"
) -> bytes:
    """Ethernet + IPv4 + TCP (no options) carrying ``payload`` from ``src`` to ``dst``;
    checksums left zero."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x18, 64240, 0, 0) + payload
    addrs = socket.inet_aton(src), socket.inet_aton(dst)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, *addrs)
    return bytes(12) + b"\x08\x00" + ip + tcp


def _server_hello(group: int) -> bytes:
    """A TLS 1.3 ServerHello record choosing ``group`` (a 32-byte share)."""
    ext = struct.pack("!HHHH", 0x002B, 2, 0x0304, 0x0033)  # supported_versions, key_share
    ext += struct.pack("!HHH", 36, group, 32) + bytes(32)
    body = b"\x03\x03" + bytes(range(32)) + b"\x00" + b"\x13\x01\x00"
    body += struct.pack("!H", len(ext)) + ext
    msg = b"\x02" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x03" + struct.pack("!H", len(msg)) + msg


def test_a_transfers_segment_that_begins_like_a_record_is_not_a_hello() -> None:
    """The capture keeps every segment whose payload begins with byte 22; a long TLS
    transfer has such segments by chance. Only a hello record is read, and only the
    first ServerHello of a connection names its group."""
    # mid-record bytes that begin with 22 and read on as a ServerHello would
    chance = b"\x16\x97\x11\x00\x40" + b"\x02\x00\x00\x3c" + bytes(60)
    forged = _server_hello(4588)  # a later segment that parses as a hello: not the first
    data = _pcap(
        [
            _segment(443, 50000, _server_hello(29)),
            _segment(443, 50000, chance),
            _segment(443, 50000, forged),
        ]
    )
    (h,) = hellos(data, 443)
    assert (h.transport, h.client_port, h.group, h.group_name) == ("tcp", 50000, 29, "x25519")
    assert h.cipher == "TLS_AES_128_GCM_SHA256" and h.resumed is False and not h.hello_retry
    assert hellos(_pcap([_segment(443, 50001, chance)]), 443) == []


def test_each_hello_names_its_servers_address_and_one_client_port_to_two_is_two() -> None:
    """A replayed page's origins are at addresses of their own, and Linux may give two
    connections to two of them the same client port: each connection is its own by the
    server's address too, and names it (quicbed.servers.webserver.reused_off_requests
    tells the origins apart by it)."""
    a, b, client = "10.10.1.100", "10.10.1.101", "10.10.1.2"
    data = _pcap(
        [
            _segment(443, 50000, _server_hello(29), src=a, dst=client),
            _segment(443, 50000, _server_hello(4588), src=b, dst=client),
        ]
    )
    got = [(h.client_port, h.server_ip, h.group) for h in hellos(data, 443)]
    assert got == [(50000, a, 29), (50000, b, 4588)]
    assert hellos(data, 443)[0].as_dict()["server_ip"] == a
