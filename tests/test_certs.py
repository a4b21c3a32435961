"""Test CA and leaf: SANs, key permissions, reuse, and the SPKI pin checked with openssl;
each certificate setting's chain (key type, count) as openssl reads and verifies it."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from quicbed import certs
from quicbed.settings import certificate


def test_pki_and_pin_match_openssl(tmp_path: Path) -> None:
    pki = certs.ensure(tmp_path, ["quicbed.test", "server.quicbed.test"], ["10.10.1.1"])
    leaf = x509.load_pem_x509_certificates(pki.cert.read_bytes())[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["quicbed.test", "server.quicbed.test"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["10.10.1.1"]
    assert stat.S_IMODE(pki.key.stat().st_mode) == 0o600
    pipeline = (
        f"openssl x509 -in {pki.cert} -pubkey -noout | openssl pkey -pubin -outform der"
        " | openssl dgst -sha256 -binary | base64"
    )
    out = subprocess.run(["sh", "-c", pipeline], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == pki.spki_pin
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(pki.ca_cert), str(pki.cert)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_reused_when_valid_and_remade_when_sans_change(tmp_path: Path) -> None:
    a = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"])
    b = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"])
    assert a.spki_pin == b.spki_pin
    c = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.9"])
    assert c.spki_pin != a.spki_pin


def test_each_origin_has_its_own_leaf_on_the_one_pinned_key(tmp_path: Path) -> None:
    """A replayed page's origins: one leaf each, for that host alone, verified by openssl
    against the CA, with the server leaf's SPKI (one pin trusts them all); reused while
    every asked origin is there, all remade (a new CA) when one is missing."""
    hosts = ["www.p50.example", "cdn.p50.example"]
    a = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], hosts)
    assert sorted(a.origin_certs) == sorted(hosts)
    for host, path in a.origin_certs.items():
        leaf = x509.load_pem_x509_certificates(path.read_bytes())[0]
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == [host]
        assert certs.spki_pin(leaf) == a.spki_pin
        verify = subprocess.run(
            ["openssl", "verify", "-CAfile", str(a.ca_cert), str(path)],
            capture_output=True,
            text=True,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
    b = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], hosts[:1])
    assert b.spki_pin == a.spki_pin and list(b.origin_certs) == hosts[:1]
    c = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], [*hosts, "ads.p50.example"])
    assert c.spki_pin != a.spki_pin and len(c.origin_certs) == 3
    old = subprocess.run(
        ["openssl", "verify", "-CAfile", str(c.ca_cert), str(c.origin_certs[hosts[0]])],
        capture_output=True,
        text=True,
    )
    assert old.returncode == 0, old.stdout + old.stderr  # remade under the new CA


# --- the certificate setting (issue 42): key types and chains -----------------------------
def _openssl_verify(ca: Path, chain: Path) -> subprocess.CompletedProcess[str]:
    """openssl's verdict on the first certificate of ``chain``, the rest of it offered
    as untrusted intermediates (as a client receives them), ``ca`` the one trusted root."""
    argv = ["openssl", "verify", "-CAfile", str(ca), "-untrusted", str(chain), str(chain)]
    return subprocess.run(argv, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("setting", "key_type", "bits"),
    [
        ("ecdsa-p256/1", "id-ecPublicKey", 256),
        ("rsa-2048/3", "rsaEncryption", 2048),
        ("rsa-4096/2", "rsaEncryption", 4096),
    ],
)
def test_each_setting_makes_its_chain_openssl_verifies(
    tmp_path: Path, setting: str, key_type: str, bits: int
) -> None:
    """The chain a server sends has the setting's count (the leaf; the leaf and the root;
    the leaf, an intermediate and the root), every certificate on the setting's key type
    as openssl reads it, and openssl verifies the leaf against the setting's root alone;
    a replayed page's origin leaves are sent with the same chain."""
    kind, n = certificate.split(setting)
    pki = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], ["cdn.p50.example"], kind, n)
    chain = x509.load_pem_x509_certificates(pki.cert.read_bytes())
    assert len(chain) == n and pki.cert.parent.name == pki.folder == f"{kind}-{n}"
    for cert in chain:
        pem = cert.public_bytes(serialization.Encoding.PEM)
        text = subprocess.run(
            ["openssl", "x509", "-noout", "-text"], input=pem, capture_output=True, check=True
        ).stdout.decode()
        assert f"Public Key Algorithm: {key_type}" in text and f"({bits} bit)" in text, text
    for path in (pki.cert, pki.origin_certs["cdn.p50.example"]):
        ok = _openssl_verify(pki.ca_cert, path)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert len(x509.load_pem_x509_certificates(path.read_bytes())) == n
    root = x509.load_pem_x509_certificates(pki.ca_cert.read_bytes())[0]
    assert (chain[-1] == root) is (n >= 2)  # the root is sent from a chain of two on


def test_settings_have_their_own_keys_and_are_kept_apart(tmp_path: Path) -> None:
    """Two settings on one testbed: each its own folder, leaf key and root, so a client
    given one setting's pin or root trusts no other's chain (openssl refuses it); each
    reused as it is while valid."""
    a = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], kind="rsa-2048", count=2)
    b = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], kind="rsa-2048", count=3)
    assert a.folder != b.folder and a.spki_pin != b.spki_pin
    assert a.ca_cert.read_bytes() != b.ca_cert.read_bytes()
    crossed = _openssl_verify(a.ca_cert, b.cert)
    assert crossed.returncode != 0, crossed.stdout
    again = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"], kind="rsa-2048", count=2)
    assert again.spki_pin == a.spki_pin


def test_the_default_chain_is_the_one_served_before_the_setting() -> None:
    """A cell stored before the setting served an ECDSA P-256 leaf and the root (two
    certificates): the default names that chain, so those cells keep their identity."""
    assert certificate.DEFAULT == "ecdsa-p256/2" == certificate.parse("ECDSA")
    pki = certs.TestPKI(Path("ca"), Path("c"), Path("k"), "")
    assert certificate.split(certificate.DEFAULT) == (pki.kind, pki.count)
    # every key type the setting names is one certs makes, and the reverse
    assert tuple(certificate.KEYS) == certs.KINDS


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("rsa-1024", ["'rsa-1024' is not a certificate", "ecdsa-p256, rsa-2048, rsa-4096"]),
        ("rsa-2048/0", ["chain of '0'", "1, 2, 3"]),
        ("ecdsa/three", ["chain of 'three'"]),
    ],
)
def test_a_setting_quicbed_does_not_make_is_refused_by_name(value: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        certificate.parse(value)
    assert all(w in str(err.value) for w in words), str(err.value)


def _shake(port: int, **kw: object) -> dict[str, object]:
    return {"client_port": port, "resumed": False, "cipher": 0x1301, **kw}


def test_wire_problems_judge_count_bytes_and_signature_of_each_full_handshake() -> None:
    """A connection that sent a chain is judged by its count, its bytes and its
    CertificateVerify's scheme; a resumed one sent none and one without a ServerHello
    had no handshake; one whose ServerHello was read but not the rest is named."""
    sizes = [782, 739, 732]
    good = _shake(1, certificates=3, certificate_bytes=2253, signature_algorithm=0x0804)
    resumed = _shake(2, resumed=True, certificates=0, certificate_bytes=0)
    left = _shake(6, cipher=None, certificates=None)  # opened, no ServerHello
    assert certificate.wire_problems("rsa-2048/3", sizes, [good, resumed, left]) == []
    short = _shake(3, certificates=2, certificate_bytes=1521, signature_algorithm=0x0804)
    ecdsa = _shake(4, certificates=3, certificate_bytes=2253, signature_algorithm=0x0403)
    dark = _shake(5, certificates=None)
    got = certificate.wire_problems("rsa-2048/3", sizes, [short, ecdsa, dark])
    assert got == [
        "port 3: 2 certificates, 1521 B on the wire, not the rsa-2048/3 chain's 3 of 2253 B",
        "port 4: CertificateVerify signed with scheme 0x0403, not an rsa-2048 key's",
        "port 5: its Certificate message was not decrypted",
    ]
    # a replayed page: each origin's own leaf, the same issuers; the connection's bytes
    # must be one of the cell's chains
    origin = _shake(7, certificates=3, certificate_bytes=2260, signature_algorithm=0x0804)
    assert certificate.wire_problems("rsa-2048/3", sizes, [origin], [[789, 739, 732]]) == []
    assert certificate.wire_problems("rsa-2048/3", sizes, [origin]) == [
        "port 7: 3 certificates, 2260 B on the wire, not the rsa-2048/3 chain's 3 of 2253 B"
    ]
    stray = _shake(8, certificates=3, certificate_bytes=2270, signature_algorithm=0x0804)
    assert certificate.wire_problems("rsa-2048/3", sizes, [stray], [[789, 739, 732]]) == [
        "port 8: 3 certificates, 2270 B on the wire, not the rsa-2048/3 chain's 3 of 2253 B "
        "or 2260 B"
    ]
