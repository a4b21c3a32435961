"""Reading each role's network counters around a load or flow (quicbed.results.netcounters).

One command per role, in the role's network namespace (the counters are per
namespace), before and after (quicbed.procnet).
"""

from __future__ import annotations

from typing import Any

from quicbed import procnet
from quicbed.results.netcounters import RoleCounters, difference, parse
from quicbed.roles import ROLES
from quicbed.testbed.lifecycle import Testbed


class NetMeter:
    """Counters of every role: a reading, and what they grew by since one."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb

    def read(self) -> dict[str, dict[str, Any] | str]:
        """Per role, its counters now, or why they could not be read."""
        out: dict[str, dict[str, Any] | str] = {}
        for role in ROLES:
            got = procnet.read(self.tb, role)
            out[role] = got if isinstance(got, str) else parse(*got)
        return out

    def since(self, before: dict[str, dict[str, Any] | str]) -> dict[str, RoleCounters]:
        """Per role whose counters were read both times, what they grew by."""
        after = self.read()
        out = {}
        for role in ROLES:
            a, b = before.get(role), after.get(role)
            if isinstance(a, dict) and isinstance(b, dict):
                out[role] = difference(a, b)
        return out
