"""Shared fixtures: real namespaces with a unique prefix, proven gone afterwards."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest

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
