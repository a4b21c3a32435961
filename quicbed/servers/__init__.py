"""Server stacks under test, one module each, found by name.

A stack is a :class:`~quicbed.servers.webserver.WebServer` subclass in a module of this
package: how to start its server, which congestion controls and parameters it
takes, how to read a load's facts from its log and what a valid load must show.
Adding a stack is adding one module; nothing else names stacks.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from quicbed.errors import QuicbedError
from quicbed.plugins import named_subclasses

if TYPE_CHECKING:
    from quicbed.servers.webserver import WebServer


@cache
def stacks() -> dict[str, type[WebServer]]:
    """Every stack of this package by its registry name."""
    from quicbed.servers.webserver import WebServer

    found: dict[str, type[WebServer]] = named_subclasses(
        WebServer, __name__, __path__, ("webserver",)
    )
    return found


def tcp_ccs() -> tuple[str, ...]:
    """The kernel congestion controls the TCP stacks name, sorted: what the hosts' sysctl
    or a socket's TCP_CONGESTION may be set to."""
    return tuple(sorted({cc for s in stacks().values() if s.transport == "tcp" for cc in s.ccs}))


def get_stack(name: str) -> type[WebServer]:
    try:
        return stacks()[name]
    except KeyError:
        raise QuicbedError(f"unknown stack {name!r} (one of {', '.join(stacks())})") from None
