"""The testbed backends' registry (quicbed.backends): its kinds, their testbeds, and
stored descriptions read through them as they were before the kinds had classes."""

from __future__ import annotations

import typing

import pytest

from quicbed import identity
from quicbed.backends import (
    DEFAULT_KIND,
    Backend,
    LocalBackend,
    SshBackend,
    backends,
    described,
    get_backend,
    hosts_kind,
    kinds_help,
)
from quicbed.errors import QuicbedError
from quicbed.spec.sweepspec import SweepSpec
from quicbed.testbed import lifecycle
from quicbed.testbed.local import LocalTestbed
from quicbed.testbed.ssh import SshTestbed


def test_the_kinds_keep_their_stored_names() -> None:
    """The names are in every stored spec and description: never renamed."""
    assert backends() == {"local": LocalBackend, "ssh": SshBackend}
    assert DEFAULT_KIND == "local" and hosts_kind() == "ssh"
    assert typing.get_args(SweepSpec.model_fields["testbed"].annotation) == ("local", "ssh")
    assert SweepSpec.model_fields["testbed"].default == "local"
    assert kinds_help() == "local (namespaces here) or ssh (three hosts)."


def test_every_kind_has_its_testbed() -> None:
    """A kind's testbed subclasses it (so inherits its name and capabilities) and is
    not registered a second time."""
    assert lifecycle.testbed_class("local") is LocalTestbed
    assert lifecycle.testbed_class("ssh") is SshTestbed
    for kind, backend in backends().items():
        cls = lifecycle.testbed_class(kind)
        assert issubclass(cls, backend) and issubclass(cls, lifecycle.Testbed)
        assert cls.kind == kind
    with pytest.raises(QuicbedError, match=r"--testbed: unknown 'emulab' \(local or ssh\)"):
        get_backend("emulab", "--testbed")


def test_the_capabilities_of_the_two_kinds() -> None:
    """What callers asked as ``kind == "local"`` before, true of the local kind only."""
    for cap in (
        "one_machine",
        "controller_is_host",
        "shared_host_sysctls",
        "makes_namespaces",
        "counts_gso_segments",
    ):
        assert getattr(LocalBackend, cap) and not getattr(SshBackend, cap), cap
    assert SshBackend.takes_hosts and not LocalBackend.takes_hosts
    assert (LocalBackend.found_ready, SshBackend.found_ready) == ("already up", "reachable")


def test_stored_descriptions_read_as_before() -> None:
    """Identities, rerun options and the kind of a description without one."""
    local = {"kind": "local", "prefix": "qb"}
    ssh = {
        "kind": "ssh",
        "source": "/m.xml",
        "nodes": {"server": {"host": "s", "port": 22}, "client": {"host": "c", "port": 2}},
    }
    assert identity.testbed_id(local) == "local qb"
    assert identity.testbed_id(ssh) == "ssh client=c:2,server=s:22"
    assert identity.testbed_id({}) == identity.testbed_id(None) == "unknown"
    assert described("local").rerun_options(local) == ""
    assert described("ssh").rerun_options(ssh) == " --testbed ssh --hosts /m.xml"
    assert described("ssh").rerun_options({"kind": "ssh"}) == " --testbed ssh --hosts HOSTS"
    assert described(None) is LocalBackend  # old provenance without a testbed
    assert described("future") is Backend  # read by the defaults of a testbed elsewhere
