"""The browsers under test, one module each, found by name; HARs and load verification.

A browser is a :class:`~quicbed.client.browser.Browser` subclass in a module of this
package (``chromium``, ``chromium72``, ``firefox``): how it is installed, started,
cleared between loads and stopped, which protocols and modes it can measure, and how
figures name it. The spec asks :func:`get_browser` what a browser can do; the runner
starts the one an arm resolves to. Adding a browser is adding one module (and its
page-load driver and role); nothing else names browsers.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from quicbed.errors import QuicbedError
from quicbed.plugins import named_subclasses

if TYPE_CHECKING:
    from quicbed.client.browser import Browser

#: modules of this package that hold no browser
_NOT_BROWSERS = ("browser", "har", "transfer", "visual")


@cache
def browsers() -> dict[str, type[Browser]]:
    """Every browser of this package by its registry name."""
    from quicbed.client.browser import Browser

    found: dict[str, type[Browser]] = named_subclasses(Browser, __name__, __path__, _NOT_BROWSERS)
    return found


def get_browser(name: str) -> type[Browser]:
    try:
        return browsers()[name]
    except KeyError:
        raise QuicbedError(f"unknown browser {name!r} (one of {', '.join(browsers())})") from None
