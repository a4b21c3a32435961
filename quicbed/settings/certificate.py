"""The server's certificate chain as a verified cell setting: the same chain on every arm.

A handshake that is not resumed carries the server's certificate chain and a
CertificateVerify signed with the leaf's key. Their size and their signing cost are
what a key type and a chain length change: an ECDSA P-256 chain of two is 0.7 KB, an
RSA-4096 chain of three 3.8 KB, which with the rest of a QUIC server's first flight can
pass the anti-amplification limit (RFC 9000 8.1: three times what the client has sent
before its address is validated; docs/benchmarks/handshake.md measured QUICHE in Envoy
held by it).

So a cell names its chain (``certificate``, spelled ``KEY`` or ``KEY/N``): ``KEY`` one
of :data:`KEYS` (every certificate of the chain on that key type, as a CA of that type
issues them), ``N`` the number of certificates the server sends (1: the leaf alone,
signed by the root; 2: the leaf and the root, quicbed's chain before the setting; 3:
the leaf, an intermediate and the root). Every arm of the cell serves the same chain:
every server here (Apache, quic-go, quiche, Envoy, gQUIC, Google's quic_server) loads a
PEM chain and a PKCS#8 key of any of these types, so none is refused.

**Proven per load by what the client trusts**: each chain is made by quicbed.certs with
its own root and leaf keys, and the root's key is thrown away once the chain is
signed. A client is given only that chain's trust anchor: Chromium the SPKI pin of its
leaf's key, Firefox, Chromium 72 and quicbed-bulk its root (an NSS database or a CA
file). A load that completes a handshake has therefore been served a chain on that leaf
key (Chromium) or under that root (the others); a chain of another setting fails the
handshake. Each attempt records the chain its loads were served (:func:`chain_fact`).

**Counted per load from the wire at level full**: the load's capture, decrypted with
its key log (quicbed.traces.handshake), gives every connection's Certificate message:
the number of certificates and their DER bytes, and the CertificateVerify's signature
scheme. :func:`wire_problems` names a connection whose chain is not the setting's
(another count, other bytes, a signature of another key type); a resumed connection
sends no chain, and one that never had a ServerHello no handshake: neither is judged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

#: quicbed's names of the key types, and the TLS 1.3 SignatureSchemes (RFC 8446 4.2.3)
#: a CertificateVerify made with such a leaf may carry
KEYS: dict[str, frozenset[int]] = {
    "ecdsa-p256": frozenset({0x0403}),  # ecdsa_secp256r1_sha256
    # rsa_pss_rsae_sha256/384/512 (TLS 1.3 signs with PSS; PKCS#1 v1.5 is not allowed)
    "rsa-2048": frozenset({0x0804, 0x0805, 0x0806}),
    "rsa-4096": frozenset({0x0804, 0x0805, 0x0806}),
}
#: other spellings accepted for them
ALIASES = {
    "ecdsa": "ecdsa-p256",
    "p256": "ecdsa-p256",
    "p-256": "ecdsa-p256",
    "ecdsa-p-256": "ecdsa-p256",
    "rsa2048": "rsa-2048",
    "rsa4096": "rsa-4096",
}
#: certificates a server may send: the leaf alone, with the root, with an intermediate
CHAINS = (1, 2, 3)
DEFAULT_KEY, DEFAULT_CHAIN = "ecdsa-p256", 2
#: the chain every cell served before the setting (and the default)
DEFAULT = f"{DEFAULT_KEY}/{DEFAULT_CHAIN}"


def parse(value: object) -> str:
    """A certificate setting as quicbed spells it (``KEY/N``), or an error naming the
    value and what is allowed."""
    text = str(value).strip().lower()
    key, sep, chain = text.partition("/")
    key = ALIASES.get(key.strip(), key.strip())
    if key not in KEYS:
        raise ValueError(
            f"{value!r} is not a certificate quicbed makes: KEY or KEY/N, KEY one of "
            f"{', '.join(KEYS)}, N the certificates sent ({', '.join(map(str, CHAINS))})"
        )
    n = chain.strip() if sep else str(DEFAULT_CHAIN)
    if not n.isdigit() or int(n) not in CHAINS:
        raise ValueError(
            f"{value!r}: a chain of {n!r} certificates is not one quicbed makes: "
            f"{', '.join(map(str, CHAINS))} (the leaf; the leaf and the root; the leaf, "
            "an intermediate and the root)"
        )
    return f"{key}/{int(n)}"


def split(setting: str) -> tuple[str, int]:
    """``(key, chain)`` of a parsed setting."""
    key, _, n = parse(setting).partition("/")
    return key, int(n)


def chain_sizes(pem: bytes) -> list[int]:
    """The DER size of each certificate of a PEM chain, in the order a server sends them
    (what a Certificate message's entries carry)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return [
        len(c.public_bytes(serialization.Encoding.DER))
        for c in x509.load_pem_x509_certificates(pem)
    ]


def chain_fact(
    setting: str,
    pem: bytes,
    root: bytes,
    pin: str,
    anchors: dict[str, str],
    origins: dict[str, bytes] | None = None,
) -> dict[str, Any]:
    """What a cell's attempt records of the chain its loads were served: the setting,
    each certificate's DER size in the order sent, the leaf's SPKI pin, the root's
    SHA-256, and per arm the one anchor its client was given (``spki pin``: Chromium;
    ``root``: a client that trusts by CA): every load that completed a handshake was
    served this chain (module docstring). A replayed page's ``origins`` (host -> its
    chain's PEM: its own leaf, the same issuers) add each one's DER sizes."""
    sizes = chain_sizes(pem)
    return {
        "setting": parse(setting),
        "certificates": len(sizes),
        "der_bytes": sizes,
        "spki_pin": pin,
        "root_sha256": ca_fingerprint(root),
        "trusted_by": anchors,
        **(
            {"origin_der_bytes": {h: chain_sizes(p) for h, p in sorted(origins.items())}}
            if origins
            else {}
        ),
    }


def ca_fingerprint(pem: bytes) -> str:
    """SHA-256 (hex) of the DER of the first certificate of ``pem``: the root a client
    that trusts by CA was given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    der = x509.load_pem_x509_certificates(pem)[0].public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def wire_problems(
    setting: str,
    sizes: list[int],
    handshakes: list[dict[str, Any]],
    others: Collection[list[int]] = (),
) -> list[str]:
    """Why the chains a load's connections carried (quicbed.traces.handshake's facts)
    are not the setting's chain of ``sizes``: each connection that sent one is judged by
    its certificate count, its certificates' bytes (a Certificate entry's length is the
    DER's) and its CertificateVerify's signature scheme; resumed connections send none,
    a connection without a ServerHello (one the browser opened and left), or one the
    client left before sending anything after the server's flight (a socket it raced and
    dropped: it never read the chain, and logged no keys for it), had no handshake, and
    any other whose messages were not decrypted cannot be judged (named).
    ``others``: a replayed page's origins' chains, each as good as ``sizes`` (the facts
    name no server, so a connection's bytes must be one of the cell's chains')."""
    key, n = split(setting)
    totals = {sum(sizes), *(sum(o) for o in others)}
    out: list[str] = []
    for h in handshakes:
        port = h.get("client_port")
        if h.get("resumed") or h.get("certificates") == 0 or h.get("cipher") is None:
            continue
        if h.get("client_continued") is False:  # the client left before its Finished
            continue
        if h.get("certificates") is None:
            out.append(f"port {port}: its Certificate message was not decrypted")
            continue
        if h["certificates"] != n or h.get("certificate_bytes") not in totals:
            out.append(
                f"port {port}: {h['certificates']} certificates, {h.get('certificate_bytes')} B "
                f"on the wire, not the {setting} chain's {n} of "
                + " or ".join(f"{t} B" for t in sorted(totals))
            )
        sig = h.get("signature_algorithm")
        if sig is not None and sig not in KEYS[key]:
            out.append(
                f"port {port}: CertificateVerify signed with scheme 0x{sig:04x}, not an {key} key's"
            )
    return out
