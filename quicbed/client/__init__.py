"""The browsers under test, one module each, found by name; HARs and load verification.

A browser is a :class:`~quicbed.client.base.Browser` subclass in a module of this
package (``chromium``, ``chromium72``, ``firefox``): how it is installed, started,
cleared between loads and stopped, which protocols and modes it can measure, and how
figures name it. The spec asks :func:`get_browser` what a browser can do; the runner
starts the one an arm resolves to. Adding a browser is adding one module (and its
page-load driver and role); nothing else names browsers.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import TYPE_CHECKING

from quicbed.errors import QuicbedError

if TYPE_CHECKING:
    from quicbed.client.base import Browser

#: modules of this package that hold no browser
_NOT_BROWSERS = ("base", "har")


@cache
def browsers() -> dict[str, type[Browser]]:
    """Every browser of this package by its registry name."""
    from quicbed.client.base import Browser

    for mod in pkgutil.iter_modules(__path__):
        if mod.name not in _NOT_BROWSERS:
            importlib.import_module(f"{__name__}.{mod.name}")
    out: dict[str, type[Browser]] = {}
    todo = list(Browser.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in cls.__dict__:
            out[cls.name] = cls
    return dict(sorted(out.items()))


def get_browser(name: str) -> type[Browser]:
    try:
        return browsers()[name]
    except KeyError:
        raise QuicbedError(f"unknown browser {name!r} (one of {', '.join(browsers())})") from None
