"""Which testbed a stored description names: a pure function of the description.

It lives apart from quicbed.testbed so that readers of results (the report, ``verify``
on a machine without root) name testbeds without importing the code that starts
processes on them; quicbed.testbed.lifecycle re-exports it for the runner.
"""

from __future__ import annotations

from typing import Any

from quicbed.backends import described


def testbed_id(desc: dict[str, Any] | None) -> str:
    """Which testbed a description (``Testbed.describe()``, as stored in an attempt's
    provenance) names, in one line: the local testbed by its prefix, an ssh testbed by
    its hosts (each kind says: quicbed.backends.Backend.testbed_id). An interrupted
    attempt is continued only on the testbed it started on."""
    if not desc:
        return "unknown"
    return described(desc.get("kind")).testbed_id(desc)
