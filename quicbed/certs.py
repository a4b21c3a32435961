"""One test CA per testbed and a leaf for the server, trusted by Chromium via SPKI pin.

Made at set-up into the testbed's state directory. Private keys are written with
mode 0600 and never copied into results unless the user asks.

A replayed page (quicbed.replay) has many origins, each served with its own
certificate as a real site's are (a certificate's size is part of each handshake):
one leaf per origin host, named for it alone, signed by the same CA in the same
session, all on the server leaf's key, so one SPKI pin trusts them all.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Short-lived on purpose: these certificates only ever face our own browser.
VALIDITY_DAYS = 30


@dataclass(frozen=True)
class TestPKI:
    ca_cert: Path
    cert: Path  # leaf + CA chain (PEM)
    key: Path
    spki_pin: str  # base64(sha256(leaf SubjectPublicKeyInfo DER))
    #: a replayed page's origins: host -> its own leaf + CA chain (PEM), on ``key``
    origin_certs: dict[str, Path] = field(default_factory=dict)


#: the origin leaves' folder in the PKI's directory
ORIGINS = "origins"


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def spki_pin(cert: x509.Certificate) -> str:
    der = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _usable(cert_path: Path, names: list[str], ips: list[str]) -> x509.Certificate | None:
    """The existing leaf if it is still valid for a day and has exactly these SANs."""
    try:
        leaf = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
    except (OSError, ValueError, IndexError):
        return None
    if leaf.not_valid_after_utc < dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
        return None
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    have = sorted(san.get_values_for_type(x509.DNSName)) + sorted(
        str(i) for i in san.get_values_for_type(x509.IPAddress)
    )
    return leaf if have == sorted(names) + sorted(ips) else None


def _origins_usable(directory: Path, leaf: x509.Certificate, hosts: Sequence[str]) -> bool:
    """Every origin's leaf is there, for its host alone, on the server leaf's key and
    signed by the CA that signed it."""
    ca = x509.load_pem_x509_certificates((directory / "ca.pem").read_bytes())[0]
    for host in hosts:
        found = _usable(directory / ORIGINS / f"{host}.pem", [host], [])
        if found is None or spki_pin(found) != spki_pin(leaf):
            return False
        try:
            found.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return False
    return True


def ensure(
    directory: Path, names: list[str], ips: list[str], origins: Sequence[str] = ()
) -> TestPKI:
    """Make (or reuse) the CA, the server leaf and the ``origins``' leaves in
    ``directory``: all of them anew when one is missing or stale (the CA key is never
    kept, so no leaf is ever signed later)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = (directory / n for n in ("ca.pem", "server.pem", "server.key"))
    leaf = _usable(cert_path, names, ips) if key_path.exists() else None
    if leaf is not None and origins and not _origins_usable(directory, leaf, origins):
        leaf = None
    if leaf is None:
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        until = now + dt.timedelta(days=VALIDITY_DAYS)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "quicbed test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        ca_path.write_bytes(ca_pem)
        cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + ca_pem)
        _write_private(key_path, _pem_key(key))
        shutil.rmtree(directory / ORIGINS, ignore_errors=True)  # an older CA's
        if origins:
            (directory / ORIGINS).mkdir()
        for host in origins:
            own = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now)
                .not_valid_after(until)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(
                    x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
                )
                .sign(ca_key, hashes.SHA256())
            )
            pem = own.public_bytes(serialization.Encoding.PEM) + ca_pem
            (directory / ORIGINS / f"{host}.pem").write_bytes(pem)
        # the CA key is not kept: nothing else is ever signed with it
    mine = {h: directory / ORIGINS / f"{h}.pem" for h in origins}
    return TestPKI(ca_path, cert_path, key_path, spki_pin(leaf), mine)
