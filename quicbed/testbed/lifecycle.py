"""A testbed's life: made, owned, torn down; the roles themselves are quicbed.roles.interface.

:class:`Testbed` is what the runner and the commands hold: the roles' operations
(:class:`~quicbed.roles.interface.Roles`) and the testbed's lifecycle, whose teardown
removes everything quicbed made on it, the link's shaping included
(quicbed.shapers, which act on the roles alone).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from abc import abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quicbed import plugins
from quicbed.backends import get_backend
from quicbed.identity import testbed_id
from quicbed.roles import ROLES
from quicbed.roles.interface import (
    CLIENT_IP,
    PREFIX_LEN,
    SERVER_IP,
    Process,
    Roles,
    RPath,
    check_role,
)
from quicbed.testbed import owner

#: the roles' names, re-exported: the runner's modules import them with Testbed
__all__ = [
    "CLIENT_IP",
    "PREFIX_LEN",
    "ROLES",
    "SERVER_IP",
    "Process",
    "RPath",
    "Testbed",
    "check_role",
    "testbed_class",
]


class Testbed(Roles):
    """Three roles, the few operations the runner needs on them, and their life."""

    #: why a sweep over several testbeds took this one out (quicbed.run.pool); its teardown
    #: may then fail without failing the command
    lost: str | None = None

    @classmethod
    @abstractmethod
    def from_options(
        cls, *, prefix: str, hosts: str | None, user: str | None, key: str | None
    ) -> Testbed:
        """The testbed of this kind that a command's testbed options name (``--prefix``,
        ``--hosts``, ``--ssh-user``, ``--ssh-key``): how ``--testbed`` opens one
        (quicbed.cli.options has refused the options that go with another kind, and
        asked for root where ``makes_namespaces``)."""

    # --- lifecycle --------------------------------------------------------------------
    @abstractmethod
    def up(self) -> bool:
        """Make the testbed ready; True if this call created it (so the caller removes it)."""

    @abstractmethod
    def down(self) -> list[str]:
        """Remove everything quicbed started or made on it, also after a crash."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """What exists now, read from the machines themselves."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The testbed as data, for receipts and provenance."""

    def close(self) -> None:
        """Release what talking to the testbed holds (connections); the testbed stays."""
        return None

    @abstractmethod
    def lock_path(self) -> Path:
        """The controller's file whose lock says who owns this testbed (quicbed.testbed.owner)."""

    def kept_link_path(self) -> Path:
        """The controller's record of the link ``quicbed link up`` keeps on this testbed
        (quicbed.link.kept), beside the claim file: per testbed, gone with the claim's
        folder."""
        lock = self.lock_path()
        return lock.with_name(f"{lock.name}.kept-link.json")

    @contextmanager
    def claim(self, what: str) -> Iterator[owner.Claim]:
        """Own this testbed for ``what`` (re-entrant); refused while another command does.

        A previous owner that was killed left its record: its leftovers (processes,
        shaping, namespaces) are removed before the new owner starts, so no command
        ever measures on what a dead one set up.
        """
        c = owner.acquire(self.lock_path(), self.describe_short(), what)
        try:
            if c.stale is not None:
                self.clean_leftovers(c.stale)
            yield c
        finally:
            owner.release(self.lock_path())

    def holder(self) -> dict[str, Any] | None:
        """Who owns this testbed now (PID, command, since), or None."""
        return owner.holder(self.lock_path())

    def describe_short(self) -> str:
        """The testbed's name in one word, for messages."""
        return self.prefix

    def identity(self) -> str:
        """This testbed as ``testbed_id`` names it."""
        return testbed_id(self.describe())

    def teardown(self) -> list[str]:
        """Shaping, daemons and (locally) namespaces gone, uninterruptibly; what was removed."""
        # loaded by a teardown, not by every module that names a Testbed (quicbed verify
        # imports none of the runner: tests/test_layering.py)
        from quicbed import hostparam
        from quicbed.shapers import clear_all

        with owner.shielded():
            hostparam.release_all(self)  # a host-wide setting it held (TCP CUBIC's beta)
            clear_all(self)
            kept = self.kept_link_path()
            removed = [f"the kept link's record {kept}"] if kept.exists() else []
            kept.unlink(missing_ok=True)  # the link it names goes with the shaping
            return removed + self.down()

    def clean_leftovers(self, stale: dict[str, Any]) -> list[str]:
        """Remove what a killed owner left before a new owner starts."""
        removed = self.teardown()
        if removed:
            print(
                f"quicbed: testbed {self.describe_short()}: the previous owner "
                f"{owner.describe(stale)} is gone; removed what it left: "
                f"{', '.join(removed)}",
                file=sys.stderr,
            )
        return removed

    @abstractmethod
    def check_offloads(
        self, expected: Mapping[str, str] | None = None
    ) -> dict[str, dict[str, str]]:
        """NIC offloads of the experiment interfaces (``ethtool -k``), for the record;
        ``expected``: a cell's offloads (quicbed.roles.offloads), which they must have."""

    @abstractmethod
    def offload_interfaces(self) -> dict[str, tuple[str, ...]]:
        """The interfaces a cell's offloads are set on, by role (quicbed.roles.offloads)."""

    # --- files on the controller -----------------------------------------------------
    def local_stage(self, role: str, name: str) -> Path:
        """A folder on the controller whose files ``push`` puts at ``workdir(role) / name``.

        Kept for the testbed's life (the test CA lives there, pages are made once). One
        folder per testbed identity, not per prefix: every ssh testbed's prefix is
        ``ssh``, and a sweep over two of them must not make pages and certificates into
        one folder at once.
        """
        key = hashlib.sha256(self.identity().encode()).hexdigest()[:12]
        d = Path(tempfile.gettempdir()) / f"quicbed-{os.getuid()}" / f"{self.prefix}-{key}"
        d = d / role / name
        d.mkdir(parents=True, exist_ok=True)
        return d


def testbed_class(kind: str) -> type[Testbed]:
    """The testbed class of a kind (quicbed.backends.get_backend refuses an unknown one):
    the subclass of its Backend among this package's modules, which are imported only
    when a command opens a testbed, as a stack's are when it is named (quicbed.plugins),
    so that a module that merely names a Testbed loads no backend."""
    backend = get_backend(kind)
    plugins.import_modules("quicbed.testbed", [str(Path(__file__).parent)])
    return next(c for c in backend.__subclasses__() if issubclass(c, Testbed))
