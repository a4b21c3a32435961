"""What the kernel says of TCP connections (``ss -tinH``): the TCP stack verifies a load's
congestion control with it, the transfer runner reads each flow's counters."""

from __future__ import annotations

import re
from typing import Any

#: ss's flags before the CC name on a connection's detail line
_SS_FLAGS = {"ts", "sack", "ecn", "ecnseen", "fastopen", "noqueue"}
_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


def ss_congestion(text: str) -> list[str]:
    """The congestion control of each connection in ``ss -tinH`` output, in order: on a
    connection's (indented) detail line, the first bare word that is not a flag."""
    out = []
    for line in text.splitlines():
        if not line[:1].isspace():
            continue  # the address line
        for tok in line.split():
            if ":" in tok or tok in _SS_FLAGS:
                continue
            if _WORD.match(tok):
                out.append(tok)
            break
    return out


_KV = re.compile(r"([a-z_]+):(\S+)")


def ss_connections(text: str) -> dict[int, dict[str, Any]]:
    """Per peer port, what ``ss -tinH`` says of a connection: its CC (:func:`ss_congestion`, as
    the cells verify it), ``retrans`` (total retransmitted
    segments, the second number of ``retrans:a/b``), ``bytes_retrans``, ``bytes_sent``,
    ``bytes_acked``, ``data_segs_out``, ``cwnd``, ``rtt_ms``."""
    out: dict[int, dict[str, Any]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line[:1].isspace() or not line.strip():
            continue
        addrs = [tok for tok in line.split() if ":" in tok]
        if len(addrs) < 2:
            continue
        try:
            port = int(addrs[1].rsplit(":", 1)[1])
        except ValueError:
            continue
        detail = lines[i + 1] if i + 1 < len(lines) and lines[i + 1][:1].isspace() else ""
        kv = dict(_KV.findall(detail))
        ccs = ss_congestion(line + "\n" + detail)
        rec: dict[str, Any] = {"cc": ccs[0] if ccs else None}
        if "retrans" in kv:
            rec["retrans"] = int(kv["retrans"].split("/")[-1])
        else:
            rec["retrans"] = 0  # ss omits the field until the first retransmission
        for k in ("bytes_retrans", "bytes_sent", "bytes_acked", "data_segs_out", "cwnd"):
            if k in kv and kv[k].isdigit():
                rec[k] = int(kv[k])
        rec.setdefault("bytes_retrans", 0)
        if "rtt" in kv:
            rec["rtt_ms"] = float(kv["rtt"].split("/")[0])
        out[port] = rec
    return out
