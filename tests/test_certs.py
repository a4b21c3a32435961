"""Test CA and leaf: SANs, key permissions, reuse, and the SPKI pin checked with openssl."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from cryptography import x509

from quicbed import certs


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
