"""Plug-in discovery shared by the stacks (quicbed.servers), the browsers
(quicbed.client) and the testbed backends (quicbed.backends): each is a subclass, in a
module of its package, that names itself."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_modules(package: str, path: Iterable[str], skip: tuple[str, ...] = ()) -> None:
    """Import every module of ``package`` (``path``: its ``__path__``) but ``skip``, so
    that the subclasses its modules define exist: only then can they be found."""
    for mod in pkgutil.iter_modules(path):
        if mod.name not in skip:
            importlib.import_module(f"{package}.{mod.name}")


def named_subclasses(
    base: type, package: str, path: Iterable[str], skip: tuple[str, ...], key: str = "name"
) -> dict[str, type]:
    """Every subclass of ``base`` (at any depth) with its own ``key`` attribute (``name``;
    a testbed backend's ``kind``, since a testbed's ``name`` names a role), by it, once
    each module of ``package`` (``path``: its ``__path__``) but ``skip`` is imported: a
    class that only inherits a name (a variant of a stack) is not registered twice.
    Untyped in ``base`` because the bases are abstract (mypy refuses them as ``type[T]``);
    each registry states its own type."""
    import_modules(package, path, skip)
    out: dict[str, type] = {}
    todo: list[type] = list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if key in cls.__dict__:
            out[cls.__dict__[key]] = cls
    return dict(sorted(out.items()))
