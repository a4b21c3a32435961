"""Plug-in discovery shared by the stacks (quicbed.servers) and the browsers
(quicbed.client): each is a subclass, in a module of its package, that names itself."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def named_subclasses(
    base: type, package: str, path: Iterable[str], skip: tuple[str, ...]
) -> dict[str, type]:
    """Every subclass of ``base`` (at any depth) with its own ``name``, by that name, once
    each module of ``package`` (``path``: its ``__path__``) but ``skip`` is imported: a
    class that only inherits a name (a variant of a stack) is not registered twice.
    Untyped in ``base`` because the bases are abstract (mypy refuses them as ``type[T]``);
    each registry states its own type."""
    for mod in pkgutil.iter_modules(path):
        if mod.name not in skip:
            importlib.import_module(f"{package}.{mod.name}")
    out: dict[str, type] = {}
    todo: list[type] = list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in cls.__dict__:
            out[cls.__dict__["name"]] = cls
    return dict(sorted(out.items()))
