"""One test chain per certificate setting and testbed, its leaf trusted by Chromium via
SPKI pin and its root by the browsers that trust by CA.

Made into the testbed's state directory, a folder per setting
(quicbed.settings.certificate: the key type of every certificate, and how many the
server sends: the leaf; the leaf and the root; the leaf, an intermediate and the root).
Each setting's chain has its own keys, so a client given one setting's anchor accepts
no other setting's chain. Private keys are written with mode 0600 and never copied into
results unless the user asks; the root's and intermediates' keys are not kept at all.

A replayed page (quicbed.replay) has many origins, each served with its own
certificate as a real site's are (a certificate's size is part of each handshake):
one leaf per origin host, named for it alone, signed by the server leaf's issuer in the
same session and sent with the same chain, all on the server leaf's key, so one SPKI pin
trusts them all.
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
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey
#: the root's name (every setting's root has its own key; the name is the one quicbed's
#: chain had before the certificate setting, so the default chain's bytes are its)
CA_NAME = "quicbed test CA"

#: Short-lived on purpose: these certificates only ever face our own browser.
VALIDITY_DAYS = 30


@dataclass(frozen=True)
class TestPKI:
    ca_cert: Path
    cert: Path  # the chain the server sends (PEM): the leaf, then its issuers
    key: Path
    spki_pin: str  # base64(sha256(leaf SubjectPublicKeyInfo DER))
    #: a replayed page's origins: host -> its own leaf and the chain's issuers (PEM), on ``key``
    origin_certs: dict[str, Path] = field(default_factory=dict)
    #: the key type of every certificate of the chain (:data:`KINDS`) and how many
    #: certificates the server sends
    kind: str = "ecdsa-p256"
    count: int = 2

    @property
    def folder(self) -> str:
        """The chain's folder, the same name on the controller and on the server."""
        return folder_name(self.kind, self.count)


def folder_name(kind: str, count: int) -> str:
    """The folder of a chain of ``count`` certificates on ``kind`` (a testbed keeps one
    per chain, on the controller and on the server)."""
    return f"{kind}-{count}"


#: the origin leaves' folder in the PKI's directory
ORIGINS = "origins"


def _pem_key(key: PrivateKey) -> bytes:
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
    signed by the certificate that signed it (the next in its chain, else the root)."""
    chain = x509.load_pem_x509_certificates((directory / "server.pem").read_bytes())
    ca = (
        chain[1]
        if len(chain) > 1
        else x509.load_pem_x509_certificates((directory / "ca.pem").read_bytes())[0]
    )
    for host in hosts:
        found = _usable(directory / ORIGINS / f"{host}.pem", [host], [])
        if found is None or spki_pin(found) != spki_pin(leaf):
            return False
        try:
            found.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return False
    return True


#: the key types quicbed makes chains of (quicbed.settings.certificate names them to users)
KINDS = ("ecdsa-p256", "rsa-2048", "rsa-4096")


def _new_key(kind: str) -> PrivateKey:
    """A private key of the key type ``kind`` (:data:`KINDS`)."""
    if kind == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    bits = {"rsa-2048": 2048, "rsa-4096": 4096}[kind]
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def _key_kind(cert: x509.Certificate) -> str | None:
    """quicbed's name of a certificate's key type, None for another."""
    pub = cert.public_key()
    if isinstance(pub, ec.EllipticCurvePublicKey) and pub.curve.name == "secp256r1":
        return "ecdsa-p256"
    if isinstance(pub, rsa.RSAPublicKey) and pub.key_size in (2048, 4096):
        return f"rsa-{pub.key_size}"
    return None


def _issue(
    subject: str,
    issuer: x509.Name,
    public: PublicKey,
    signer: PrivateKey,
    window: tuple[dt.datetime, dt.datetime],
    *,
    ca_path_length: int | None = None,
    sans: Sequence[x509.GeneralName] = (),
) -> x509.Certificate:
    """One certificate for ``subject`` signed by ``signer`` (SHA-256): a CA with
    ``ca_path_length`` CAs allowed below it, else a server leaf for ``sans``."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(window[0])
        .not_valid_after(window[1])
    )
    if ca_path_length is not None:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=ca_path_length), critical=True
        )
    else:
        builder = (
            builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        )
    return builder.sign(signer, hashes.SHA256())


def _chain_usable(cert_path: Path, kind: str, count: int) -> bool:
    """The chain in ``cert_path`` has ``count`` certificates, every one on ``kind``."""
    try:
        chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
    except (OSError, ValueError):
        return False
    return len(chain) == count and all(_key_kind(c) == kind for c in chain)


def ensure(
    directory: Path,
    names: list[str],
    ips: list[str],
    origins: Sequence[str] = (),
    kind: str = "ecdsa-p256",
    count: int = 2,
) -> TestPKI:
    """Make (or reuse) a chain of ``count`` certificates on the key type ``kind`` (the
    leaf; the leaf and the root; the leaf, an intermediate and the root) for the server
    leaf and the ``origins``' leaves, in the chain's own folder of ``directory``: all of
    them anew when one is missing or stale (the root's and an intermediate's keys are
    never kept, so no leaf is ever signed later)."""
    if kind not in KINDS or count not in (1, 2, 3):
        raise ValueError(f"no chain of {count} {kind} certificates: {', '.join(KINDS)}; 1-3")
    n = count
    directory = directory / folder_name(kind, count)
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = (directory / f for f in ("ca.pem", "server.pem", "server.key"))
    leaf = _usable(cert_path, names, ips) if key_path.exists() else None
    if leaf is not None and not _chain_usable(cert_path, kind, count):
        leaf = None
    if leaf is not None and origins and not _origins_usable(directory, leaf, origins):
        leaf = None
    if leaf is None:
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        window = (now, now + dt.timedelta(days=VALIDITY_DAYS))
        # the root, then n - 2 intermediates below it; the leaf is signed by the last
        ca_key = _new_key(kind)
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        below = max(n - 2, 0)
        ca = _issue(CA_NAME, ca_name, ca_key.public_key(), ca_key, window, ca_path_length=below)
        issuers: list[x509.Certificate] = []  # intermediates, the root's first
        signer, signer_name = ca_key, ca_name
        for i in range(below):
            own = _new_key(kind)
            name = f"quicbed intermediate {i + 1}"
            inter = _issue(
                name, signer_name, own.public_key(), signer, window, ca_path_length=below - i - 1
            )
            issuers.append(inter)
            signer, signer_name = own, inter.subject
        key = _new_key(kind)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        leaf = _issue(names[0], signer_name, key.public_key(), signer, window, sans=sans)
        ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        # what the server sends after each leaf: the intermediates from the leaf's
        # issuer up, and the root where the chain has more than the leaf
        tail = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in reversed(issuers))
        tail += ca_pem if n >= 2 else b""
        ca_path.write_bytes(ca_pem)
        cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + tail)
        _write_private(key_path, _pem_key(key))
        shutil.rmtree(directory / ORIGINS, ignore_errors=True)  # an older CA's
        if origins:
            (directory / ORIGINS).mkdir()
        for host in origins:
            own_leaf = _issue(
                host, signer_name, key.public_key(), signer, window, sans=[x509.DNSName(host)]
            )
            pem = own_leaf.public_bytes(serialization.Encoding.PEM) + tail
            (directory / ORIGINS / f"{host}.pem").write_bytes(pem)
        # the root's and the intermediates' keys are not kept: nothing else is signed
    mine = {h: directory / ORIGINS / f"{h}.pem" for h in origins}
    return TestPKI(ca_path, cert_path, key_path, spki_pin(leaf), mine, kind, count)
