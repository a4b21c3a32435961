"""Shared fixtures: real namespaces with a unique prefix, proven gone afterwards."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable, Iterator

import pytest

from quicbed.cell import CellResult
from quicbed.testbed.local import LocalTestbed


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def root() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces); CI runs as root")


@pytest.fixture
def prefix(root: None) -> Iterator[str]:
    """A fresh testbed prefix; fails the test if anything of it is left behind."""
    p = "t" + secrets.token_hex(3)
    yield p
    left = {n for n in _netns() if n.startswith(p + "-")}
    if left:
        LocalTestbed(p).down()
        pytest.fail(f"namespaces left behind: {sorted(left)}")


@pytest.fixture
def testbed(prefix: str) -> Iterator[LocalTestbed]:
    tb = LocalTestbed(prefix)
    tb.up()
    yield tb
    tb.down()


def until_the_link_holds(run: Callable[[], CellResult], tries: int = 3) -> CellResult:
    """Measure a cell again while its receipt fails, as a sweep retries a cell whose link
    was out of tolerance (here up to ``tries`` attempts): on a busy 2-core machine a
    short receipt's TCP probe is sometimes spoiled by another process, which the
    receipt rightly refuses; any other outcome is returned at once."""
    from quicbed.results import FailureReason

    for _ in range(tries):
        r = run()
        if r.reason is not FailureReason.LINK_OUT_OF_TOLERANCE:
            return r
    return r
