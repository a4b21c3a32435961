"""A cell's certificate chain, made on the controller and put where the roles use it.

The chain of a certificate setting (quicbed.settings.certificate) is made once per
testbed by quicbed.certs and kept in the testbed's state directory; each cell copies
it to the server (chain and key, in the chain's own folder, so cells of other settings
on one testbed keep theirs) and its root to the client, for the clients that trust by
CA (Firefox, Chromium 72, quicbed-bulk). A page cell and a transfer's flows stage it
the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quicbed import certs
from quicbed.settings import certificate
from quicbed.testbed.lifecycle import RPath, Testbed


@dataclass(frozen=True)
class StagedChain:
    """The chain on the controller, and where the roles read it."""

    pki: certs.TestPKI
    cert: RPath  # on the server: the chain (PEM)
    key: RPath  # on the server: the leaf's key (PKCS#8 PEM)
    ca: RPath  # on the client: the root, never its key


def stage_chain(
    tb: Testbed, host: str, origins: Sequence[str] = (), setting: str = certificate.DEFAULT
) -> StagedChain:
    """The chain of ``setting`` for ``host`` (and a replayed page's ``origins``) made or
    reused, and pushed to the server and (its root) to the client."""
    kind, count = certificate.split(setting)
    pki = certs.ensure(
        tb.local_stage("server", "tls"), [host], [tb.server_ip], origins, kind, count
    )
    tls = tb.workdir("server") / "tls" / pki.folder
    tb.push("server", pki.cert, tls / pki.cert.name, mode=0o644)
    tb.push("server", pki.key, tls / pki.key.name, mode=0o600)
    ca = tb.workdir("client") / "tls" / pki.folder / pki.ca_cert.name
    tb.push("client", pki.ca_cert, ca, mode=0o644)
    return StagedChain(pki, tls / pki.cert.name, tls / pki.key.name, ca)
