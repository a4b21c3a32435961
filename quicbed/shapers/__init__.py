"""Link shapers, one module each, found by name: the ways quicbed applies one link model.

A shaper is a :class:`~quicbed.shapers.shaper.Shaper` subclass in a module of this package
that names itself (``userspace``, ``netem``, ``dummynet``, ``none``) and says what it is
(``summary``), where ``auto`` tries it (``auto_rank``) and where its shaping lives
(``kernel_state``). The names a spec and ``--shaper`` take, their help and ``auto``'s
order are read from the classes here; adding a shaper is adding one module.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from quicbed.errors import QuicbedError
from quicbed.plugins import named_subclasses

if TYPE_CHECKING:
    from quicbed.model.link import LinkCondition
    from quicbed.roles.interface import Roles
    from quicbed.shapers.shaper import Shaper

#: the name that picks a shaper per testbed and link (get_shaper)
AUTO = "auto"


@cache
def shapers() -> dict[str, type[Shaper]]:
    """Every shaper of this package by its name."""
    from quicbed.shapers.shaper import Shaper

    found: dict[str, type[Shaper]] = named_subclasses(Shaper, __name__, __path__, ("shaper",))
    return found


def names() -> tuple[str, ...]:
    """What ``--shaper`` and a spec's ``shaper:`` take: ``auto``, then auto's order, then
    the shapers only named."""
    ranked = sorted((c for c in shapers().values() if c.auto_rank is not None), key=_rank)
    rest = [n for n, c in shapers().items() if c.auto_rank is None]
    return (AUTO, *(c.name for c in ranked), *rest)


def _rank(cls: type[Shaper]) -> int:
    return cls.auto_rank if cls.auto_rank is not None else 1 << 30


def check_name(name: str) -> str:
    """A shaper's name, or QuicbedError naming it and the choices."""
    if name != AUTO and name not in shapers():
        raise QuicbedError(f"unknown shaper {name!r} (one of {', '.join(names())})")
    return name


def help_text() -> str:
    """``--shaper``'s help, from the shapers' own words."""
    tried = ", ".join(n for n in names()[1:] if shapers()[n].auto_rank is not None)
    each = "; ".join(f"{n}: {shapers()[n].summary}" for n in names()[1:])
    return f"{AUTO} (the first of {tried} that runs here and emulates the link); {each}."


def check_condition(name: str, cond: LinkCondition) -> None:
    """Refuse, naming the value, a condition the named shaper cannot apply (``auto``
    takes one that can, so it refuses none): a cell is validated whole before any
    testbed is touched."""
    if name != AUTO:
        shapers()[check_name(name)]().check(cond)


def get_shaper(
    name: str,
    tb: Roles,
    cond: LinkCondition | None = None,
    emulator_priority: str | None = None,
) -> Shaper:
    """Resolve ``--shaper``: ``auto`` takes the first shaper in its order that runs here
    and, given the condition, can emulate it (Dummynet on an Emulab bridge, else netem
    where the bridge's kernel has it, else our userspace emulator; the reference
    study's ``step`` jitter: our emulator alone), so a preset runs its study's settings
    wherever it runs. An explicit shaper that cannot run here is an error naming it and
    why. ``emulator_priority``: how a shaper that runs a process of ours schedules it
    (quicbed.shapers.userspace.EMULATOR_PRIORITIES; None: its default); the kernel's
    shapers have no process to schedule."""
    from quicbed.shapers.userspace import DEFAULT_EMULATOR_PRIORITY, UserspaceShaper
    from quicbed.shapers.userspace import check_emulator_priority as check_priority

    priority = check_priority(emulator_priority or DEFAULT_EMULATOR_PRIORITY)
    check_name(name)
    if name == AUTO:
        order = names()[1:]
        ranked = [n for n in order if shapers()[n].auto_rank is not None]
        name = ranked[-1]
        for n in ranked[:-1]:
            candidate = shapers()[n]()
            if candidate.unavailable(tb) is None and _emulates(candidate, cond):
                name = n
                break
    cls = shapers()[name]
    shaper = cls(priority) if issubclass(cls, UserspaceShaper) else cls()
    reason = shaper.unavailable(tb)
    if reason:
        raise QuicbedError(f"shaper {name!r} cannot run here: {reason}")
    return shaper


def _emulates(shaper: Shaper, cond: LinkCondition | None) -> bool:
    if cond is None:
        return True
    try:
        shaper.check(cond)
    except QuicbedError:
        return False
    return True


def clear_all(tb: Roles) -> None:
    """Remove whatever shaping a crashed run may have left (every testbed's teardown:
    ``quicbed testbed down``, a dead owner's leftovers): a shaper's process always; the
    kernel's shaping only where the teardown does not remove the namespaces it lives in,
    and only by a shaper that runs on this testbed."""
    for cls in shapers().values():
        shaper = cls()
        gone = tb.makes_namespaces  # the teardown removes them, and the qdiscs in them
        if not cls.kernel_state or (not gone and shaper.unavailable(tb) is None):
            shaper.clear(tb)
