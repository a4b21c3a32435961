"""tshark's field output of a load's capture, decrypted with its key log: the one way
quicbed.traces.handshake and quicbed.traces.wire read a capture whole.

Debian 12's tshark 4.0 dissects TLS 1.3, QUIC v1 (with the key log: its Handshake and
1-RTT packets too) and gQUIC's clear header. ``-T fields -E occurrence=a`` prints one
line per packet the display filter keeps, its fields tab-separated in the order asked,
each field's occurrences comma-separated (:func:`ints` reads such a list).
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from quicbed.errors import QuicbedError
from quicbed.proc import run


def fields(
    capture: Path, keylog: Path | None, display: str, names: Sequence[str], timeout: float
) -> list[str]:
    """The lines tshark prints for ``names`` of the packets ``display`` keeps, from
    ``capture`` (``.pcap`` or ``.pcap.gz``) decrypted with ``keylog`` where given."""
    if not shutil.which("tshark"):
        raise QuicbedError("tshark is not installed: `make setup` (the tools role) installs it")
    with tempfile.TemporaryDirectory(prefix="quicbed-tshark-") as tmp:
        pcap = capture
        if capture.suffix == ".gz":  # Debian's tshark 4.0 reads gzip, but not from a pipe
            pcap = Path(tmp) / "capture.pcap"
            with gzip.open(capture, "rb") as src:
                pcap.write_bytes(src.read())
        argv = ["tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog or ''}"]
        argv += ["-Y", display, "-T", "fields", "-E", "occurrence=a"]
        for name in names:
            argv += ["-e", name]
        return run(argv, timeout=timeout).stdout.splitlines()


def ints(value: str) -> list[int]:
    """A field's comma-separated occurrences as integers (decimal or 0x hex)."""
    return [int(v, 0) for v in value.split(",") if v.strip()]
