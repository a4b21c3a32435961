"""The testbed backends by kind: what each kind is and what its stored description says.

A backend is a kind of testbed (``local``: network namespaces on this machine; ``ssh``:
three hosts). Its :class:`Backend` here holds what is true of every testbed of the
kind: its name (``--testbed``, a spec's ``testbed``, ``describe()["kind"]``), its
``--testbed`` help, its capabilities (what callers would otherwise ask of the kind's
name), and how a stored description of one reads (its identity, how to rerun on it,
its status for people). The testbed that runs cells (quicbed.testbed.local.LocalTestbed,
quicbed.testbed.ssh.SshTestbed) is a subclass of its kind's Backend and adds how it is
opened and driven.

The kinds live apart from quicbed.testbed so that readers of stored results (the
report, ``quicbed verify`` on a machine without root, quicbed.identity) look a kind up
without importing the code that starts processes on testbeds (tests/test_layering.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from quicbed.errors import QuicbedError
from quicbed.plugins import named_subclasses


class Backend(ABC):
    """A kind of testbed: its name, its capabilities and how its descriptions read.

    The capabilities default to what is safe for testbeds on other hosts; a kind whose
    roles share the controller's machine says so.
    """

    #: the kind's name: the ``--testbed`` option's value, a sweep spec's ``testbed``, the
    #: ``kind`` of every stored description (``Testbed.describe()``), so never renamed
    kind: ClassVar[str]
    #: what the ``--testbed`` option's help says of the kind, after its name
    help: ClassVar[str]
    #: the three roles and the controller are one machine and quicbed's own commands
    #: on them cost little: the host's busy time that a load's roles are not charged
    #: is other work (quicbed.link.loadproof). Not so over ssh, where every command the
    #: controller sends costs an ssh session's CPU, even on a lab of one machine
    one_machine: ClassVar[bool] = False
    #: every role runs in the controller's own file system and kernel, so callers ask
    #: this process instead of a role: they list and test a role's files in place, run
    #: quicbed's node-side modules (quicbed.hostparam, the stacks' probes) in-process,
    #: find the programs in the controller's build/bin, read the server's tracepoints in
    #: the controller's tracefs, record the controller's machine as the measurement's
    #: (no per-node record), and align the client's HAR on the controller's wall clock.
    #: A stack that only runs on provisioned nodes (``WebServer.local`` False) cannot run
    #: here, where the servers are the controller's own builds
    controller_is_host: ClassVar[bool] = False
    #: the three roles share one kernel's host-wide sysctls (``net.core.rmem_max``, the
    #: allowed CC list): they are read and raised once, on the server's host; where False,
    #: each host's are its own and are read (and raised) per role
    shared_host_sysctls: ClassVar[bool] = False
    #: the testbed is network namespaces quicbed makes on this machine and removes on
    #: ``down``: their interfaces' qdiscs go with them (a teardown has no shaping left to
    #: clear; a shaper for other hosts' bridges does not run here), opening one needs
    #: root, and ``testbed up --sshd`` can turn them into an ssh lab
    makes_namespaces: ClassVar[bool] = False
    #: the experiment interfaces (veths, every offload off) segment a GSO datagram in
    #: software before the device counts its packets, so an arm's ``gso`` shows in the
    #: counters; a real NIC may segment UDP itself and count the datagram once
    counts_gso_segments: ClassVar[bool] = False
    #: a testbed of this kind is opened from a hosts file (``--hosts``: an inventory or a
    #: portal's manifest): the CLI names it by that file, a sweep given ``--hosts`` runs
    #: on this kind, and a rerun must name its kind and hosts again
    takes_hosts: ClassVar[bool] = False
    #: how ``testbed up`` says a testbed of this kind that it found ready (``up`` made
    #: nothing): namespaces already up, hosts that answered
    found_ready: ClassVar[str] = "ready"

    @classmethod
    def testbed_id(cls, desc: dict[str, Any]) -> str:
        """Which testbed a stored description names, in one line (quicbed.identity): by
        default by its hosts, as a testbed elsewhere is known by them."""
        nodes = desc.get("nodes") or {}
        hosts = ",".join(f"{r}={n.get('host')}:{n.get('port')}" for r, n in sorted(nodes.items()))
        return f"{desc.get('kind')} {hosts}"

    @classmethod
    def rerun_options(cls, desc: dict[str, Any]) -> str:
        """The options that rerun a cell on the testbed of a stored description (the
        report's rerun line): a kind opened from hosts needs them named again, with the
        kind (the description's source where it has one); by default, none."""
        if not cls.takes_hosts:
            return ""
        return f" --testbed {cls.kind} --hosts {desc.get('source') or 'HOSTS'}"

    @classmethod
    @abstractmethod
    def status_lines(cls, info: dict[str, Any], name: str) -> list[str]:
        """``testbed status`` for people, from ``Testbed.status()`` (whose fields each
        kind chooses): the testbed's state, then each role's (rich markup)."""


class LocalBackend(Backend):
    """Network namespaces on this machine (quicbed.testbed.local)."""

    kind = "local"
    help = "namespaces here"
    one_machine = True
    controller_is_host = True
    shared_host_sysctls = True
    makes_namespaces = True
    counts_gso_segments = True
    found_ready = "already up"

    @classmethod
    def testbed_id(cls, desc: dict[str, Any]) -> str:
        """By the prefix: the namespaces' names on this machine."""
        return f"{cls.kind} {desc.get('prefix')}"

    @classmethod
    def status_lines(cls, info: dict[str, Any], name: str) -> list[str]:
        roles = info["roles"]
        state = "up" if info["complete"] else ("partial" if any(roles.values()) else "down")
        lines = [f"testbed {name}: {state}"]
        for role, r in roles.items():
            if r:
                ifs = ", ".join(
                    f"{n} {v['state']} {' '.join(v['addresses'])}".strip()
                    for n, v in r["interfaces"].items()
                )
                lines.append(
                    f"  {role:7} {r['namespace']}: {ifs}; pids {r['pids'] or '-'}; "
                    f"qdiscs {', '.join(r['qdiscs']) or '-'}"
                )
        return lines


class SshBackend(Backend):
    """Three hosts reached over ssh (quicbed.testbed.ssh)."""

    kind = "ssh"
    help = "three hosts"
    takes_hosts = True
    found_ready = "reachable"

    @classmethod
    def status_lines(cls, info: dict[str, Any], name: str) -> list[str]:
        lines = [f"ssh testbed {name}: {'reachable' if info['complete'] else 'NOT reachable'}"]
        for role, r in info["roles"].items():
            state = (
                f"{r['system']}; pids {r['pids'] or '-'}"
                if r["reachable"]
                else f"[red]{r['error']}[/]"
            )
            lines.append(f"  {role:7} {r['address']}: {state}")
        return lines


#: the kind a command or a sweep spec runs on unless told otherwise
DEFAULT_KIND = LocalBackend.kind


@cache
def backends() -> dict[str, type[Backend]]:
    """Every kind by its name. A testbed class inherits its kind's name, so it is not
    registered again."""
    found: dict[str, type[Backend]] = named_subclasses(Backend, __name__, (), (), key="kind")
    return found


def get_backend(kind: str, where: str = "testbed") -> type[Backend]:
    """The kind named ``kind``; an unknown one is refused, naming ``where`` it was given."""
    try:
        return backends()[kind]
    except KeyError:
        raise QuicbedError(f"{where}: unknown {kind!r} ({' or '.join(backends())})") from None


def described(kind: str | None) -> type[Backend]:
    """The kind of a stored description's ``kind``: a description without one is of the
    default kind (as old provenance is read), one this quicbed does not know reads by
    the defaults of a testbed elsewhere (:class:`Backend`'s)."""
    return backends().get(kind or DEFAULT_KIND, Backend)


def hosts_kind() -> str:
    """The kind a command given ``--hosts`` but no ``--testbed`` runs on."""
    return next(k for k, b in backends().items() if b.takes_hosts)


def kinds_help() -> str:
    """The ``--testbed`` option's help: each kind with what it is."""
    return " or ".join(f"{k} ({b.help})" for k, b in backends().items()) + "."


if TYPE_CHECKING:
    KindName = str
else:
    #: a sweep spec's ``testbed``: one of the kinds' names (a Literal, so a wrong one is
    #: refused with the names pydantic lists, as when they were written out)
    KindName = Literal[tuple(backends())]
