"""A replay archive put on the testbed: each origin its own address on the server and
its own certificate, the archive where every arm's server reads it, and the host map
every arm's browser resolves names by.

An origin of a real page is its own server somewhere: its own connection, handshake
and certificate. On the testbed each origin gets an address of the server's subnet
(``ORIGIN_FIRST`` upwards: the testbed's own roles use the first few), held on the
server's interface while the cell runs; every arm's server answers on all of them.
"""

from __future__ import annotations

import ipaddress
import math
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from quicbed.certs import ORIGINS, TestPKI
from quicbed.errors import QuicbedError
from quicbed.link.probes import server_addresses
from quicbed.model.link import MAX_DELAY_MS, LinkCondition
from quicbed.replay.archive import MANIFEST, MAX_ORIGINS, Archive, find, load, store
from quicbed.roles.interface import PREFIX_LEN, SERVER_IP
from quicbed.testbed.lifecycle import RPath, Testbed

#: the host part of the first origin's address in the server's /24 (MAX_ORIGINS of
#: them, ORIGIN_FIRST .. 199: quicbed.replay.archive, which the importer checks too)
ORIGIN_FIRST = 100


@dataclass(frozen=True)
class OriginServe:
    """One origin as the testbed serves it."""

    host: str
    ip: str
    port: int
    cert: RPath  # its leaf + CA chain on the server (the key is ServeSpec.key)


@dataclass(frozen=True)
class ReplayServe:
    """What every arm's server of a replay cell serves, identically."""

    name: str
    digest: str  # Archive.digest(): what every arm serves
    archive: RPath  # the archive's folder on the server (archive.json, bodies/)
    main: str  # the main document's URL: what the browser loads
    origins: tuple[OriginServe, ...]
    #: each response waits its entry's recorded server time (``wait_ms``) before it is
    #: sent (a cell's ``server_time``); False: every response at once
    wait: bool = False

    def host_map(self) -> dict[str, str]:
        """Every origin host and the address the browser must reach it at."""
        return {o.host: o.ip for o in self.origins}


def origin_ips(server_ip: str, n: int) -> list[str]:
    """The addresses of ``n`` origins in the server's subnet; refused beyond
    MAX_ORIGINS."""
    if n > MAX_ORIGINS:
        raise QuicbedError(
            f"a replayed page with {n} origins: the testbed gives at most {MAX_ORIGINS} "
            "origins an address of their own"
        )
    net = ipaddress.ip_network(f"{server_ip}/{PREFIX_LEN}", strict=False)
    return [str(net.network_address + ORIGIN_FIRST + i) for i in range(n)]


#: the cell settings' word for what the recording says: ``origin_rtt`` each origin's
#: recorded RTT, ``server_time`` each response's recorded server time
RECORDED = "recorded"
#: what both settings also take for none (a sweep scenario's axis spells it so)
NONE = ("none", "off")


def _word(value: object) -> object:
    """A setting's value as its spellings compare: a word stripped and lower-cased."""
    return value.strip().lower() if isinstance(value, str) else value


def server_time_setting(value: object) -> str | None:
    """A cell's ``server_time`` as it is kept: ``recorded`` (each response waits its
    entry's recorded server time, ``wait_ms``), or None (None, ``none``, ``off``: at
    once)."""
    word = _word(value)
    if word is None or word in NONE:
        return None
    if word == RECORDED:
        return RECORDED
    raise QuicbedError(
        f"server_time {value!r}: {RECORDED} (each response after its recorded server time) or none"
    )


def origin_setting(value: object) -> str | None:
    """A cell's ``origin_rtt`` as it is kept: ``recorded`` (each origin's RTT as the
    archive recorded it), one extra RTT in ms for every origin (``40``), or None (None,
    ``none``, ``off``: every origin at the link's RTT)."""
    word = _word(value)
    if word is None or word in NONE:
        return None
    if word == RECORDED:
        return RECORDED
    try:
        ms = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        ms = math.nan
    if not (0 <= ms <= MAX_DELAY_MS):
        raise QuicbedError(
            f"origin_rtt {value!r}: {RECORDED} (each origin's recorded RTT) or an extra RTT "
            f"in [0, {MAX_DELAY_MS:g}] ms for every origin"
        )
    return f"{ms:g}"


def origin_rtts(archive: Archive, setting: str, server_ip: str = SERVER_IP) -> dict[str, float]:
    """Each origin's address and the RTT the link adds for it: its recorded one (0 for
    an origin whose entries all reused a connection, which recorded none) or the
    setting's for all."""
    ips = origin_ips(server_ip, len(archive.origins))
    if setting == RECORDED:
        return {ip: o.rtt_ms or 0.0 for o, ip in zip(archive.origins, ips, strict=True)}
    return dict.fromkeys(ips, float(setting))


def checked(name: str, digest: str) -> tuple[Path, Archive]:
    """The stored archive ``name`` with every body checked, and it is the one a cell
    was made with (``digest``); its origins on 443 and few enough for addresses."""
    folder = find(name)
    if folder is None:
        raise QuicbedError(f"no replay archive {name!r} in {store()} (quicbed pages list)")
    archive = load(folder)
    if archive.digest() != digest:
        raise QuicbedError(
            f"replay archive {name!r} in {store()} is not the one the cell was made with "
            f"(digest {archive.digest()[:12]}, the cell's {digest[:12]}): it was imported "
            "or built again"
        )
    off = [o.origin for o in archive.origins if o.port != 443]
    if off:
        raise QuicbedError(
            f"replay archive {name!r}: origin {off[0]} is not on port 443 (quicbed serves "
            "every origin on 443)"
        )
    origin_ips(SERVER_IP, len(archive.origins))  # refuses too many origins
    return folder, archive


def put(
    tb: Testbed, folder: Path, archive: Archive, pki: TestPKI, *, wait: bool = False
) -> ReplayServe:
    """The archive and its origins' certificates on the server (the archive only once
    per digest: its folder there is named by it), and what the servers are given
    (``wait``: each response after its recorded server time)."""
    ips = origin_ips(tb.server_ip, len(archive.origins))
    work = tb.workdir("server")
    digest = archive.digest()
    there = work / "replay" / digest
    if not tb.has_file("server", there / MANIFEST):
        tb.push("server", folder, there)
    origins = []
    for o, ip in zip(archive.origins, ips, strict=True):
        cert = work / "tls" / pki.folder / ORIGINS / f"{o.host}.pem"
        tb.push("server", pki.origin_certs[o.host], cert, mode=0o644)
        origins.append(OriginServe(host=o.host, ip=ip, port=o.port, cert=cert))
    return ReplayServe(
        name=archive.name,
        digest=digest,
        archive=there,
        main=archive.main,
        origins=tuple(origins),
        wait=wait,
    )


def addresses(tb: Testbed, serve: ReplayServe) -> AbstractContextManager[None]:
    """Each origin's address on the server's interface while the cell runs."""
    return server_addresses(tb, [o.ip for o in serve.origins])


def check_link(serve: ReplayServe, cond: LinkCondition) -> None:
    """A link with per-origin RTTs delays exactly the addresses the origins got (the
    condition names them from the testbed's usual server address; a testbed whose
    server has another gives its origins others, and the link would delay none)."""
    rtts = cond.origin_rtts()
    got = sorted(o.ip for o in serve.origins)
    if rtts and sorted(rtts) != got:
        raise QuicbedError(
            f"origin_rtt: the link delays {', '.join(sorted(rtts))}, but the origins are at "
            f"{', '.join(got)} on this testbed (its server is not at {SERVER_IP})"
        )
