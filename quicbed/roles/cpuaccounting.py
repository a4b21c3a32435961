"""CPU per role: the control groups of a testbed's processes, from the controller.

Each arm's server, each arm's browser or bulk client and the link emulator run in a
control group of their own on their role's host (quicbed.roles.cgroups says which
kind a host has and where). A process joins its group before it execs, so everything
it forks is counted there too: :meth:`CpuGroups.wrap` puts a two-line ``sh`` in front
of the command line, which writes its own PID to the group's ``cgroup.procs`` and
then execs the command (same PID: the testbed's process handle and PID records stay
right). Writing the PID after the spawn would miss what the process forked in
between (Apache's children, Chromium's zygote and renderers).

The runner says which group a spawn belongs to (``with tb.cpu.joining("server",
"server-h3"): server.start()``), so neither the stacks nor the browsers know of
groups; a load's or flow's CPU time is the difference of two readings of its groups'
counters (:meth:`CpuGroups.read`). The groups live as long as the testbed's state:
its teardown removes them, and with them whatever a killed run left running in them.

This module is below the testbed's roles (quicbed.roles.interface gives every testbed a
:class:`CpuGroups`), so it knows a testbed only by the few operations of :class:`Host`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from quicbed.errors import QuicbedError
from quicbed.roles import ROLES, cgroups

#: the roles whose hosts must have CPU accounting for a cell to start (the bridge's
#: shaper may be a kernel's, with no process of ours to account: its host is read
#: where it can be and its figure is missing with the reason where not)
ENDPOINTS = ("server", "client")
#: the link emulator's group on the bridge
EMULATOR = "emulator"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class Host(Protocol):
    """What the groups need of a testbed (quicbed.roles.interface.Roles has it all)."""

    prefix: str

    def name(self, role: str) -> str: ...

    def on_host(self, role: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]: ...

    def python(self, role: str) -> list[str]: ...

    def workdir(self, role: str) -> PurePosixPath: ...


@dataclass(frozen=True)
class Mechanism:
    """A host's accounting: its kind (cgroup1, cgroup2) and the hierarchy's mount."""

    kind: str
    mount: str


@dataclass(frozen=True)
class Reading:
    """A group's counters at one instant: CPU time used so far, in nanoseconds (the
    total exact, its user/system split sampled: quicbed.roles.cgroups)."""

    total_ns: int
    user_ns: int
    system_ns: int


#: the placements by name: ``none`` pins nothing; ``split`` puts the link emulator on
#: the bridge host's first CPU and the server and client on the others (on one host,
#: as here: the emulator never competes with the endpoints for a core)
PLACEMENTS = ("none", "split")


def parse_placement(text: str) -> dict[str, str] | str:
    """``none``, ``split``, or ``role=cpus,...`` (cpus: one CPU or a range, e.g.
    ``bridge=0,server=1,client=1``) -> the explicit map, or the name to resolve on
    the hosts; a bad one is an error naming it."""
    if text in PLACEMENTS:
        return text
    out: dict[str, str] = {}
    for item in text.split(","):
        role, eq, cpus = item.partition("=")
        role = role.strip()
        if not eq or role not in ROLES:
            raise QuicbedError(
                f"--placement: {item!r} is not role=CPUs (roles {', '.join(ROLES)}; or "
                f"{' or '.join(PLACEMENTS)})"
            )
        if role in out:
            raise QuicbedError(f"--placement: role {role} given twice")
        try:
            cgroups.cpu_list(cpus.strip())
        except ValueError as exc:
            raise QuicbedError(f"--placement: {role}: {exc}") from None
        out[role] = cpus.strip()
    return out


def group_name(role: str, arm: str | None = None) -> str:
    """``server-h3``, ``client-h3``, ``bridge``: one group per role and arm."""
    return role if arm is None else f"{role}-{_SAFE.sub('_', arm)}"


class CpuGroups:
    """One testbed's groups: found, joined by spawns, read, removed."""

    def __init__(self, host: Host) -> None:
        self.host = host
        #: the kind to take where a host has both (None: quicbed.roles.cgroups.detect's
        #: order); the tests measure the cgroup2 path on this hybrid host with it
        self.prefer: str | None = None
        self._found: dict[str, Mechanism | str] = {}
        self._made: set[tuple[str, str]] = set()
        self._active: dict[str, str] = {}
        self._hosts: dict[str, str] | None = None
        self._name: str | None = None
        #: per role, where its host can pin groups to CPUs (quicbed.roles.cgroups'
        #: detect_cpuset), and the CPUs each role's groups are pinned to
        self._cpuset: dict[str, dict[str, str]] = {}
        self._placement: dict[str, str] | str = "none"
        self._placed: dict[tuple[str, str], str] = {}

    @property
    def folder(self) -> str:
        """This testbed's folder under a hierarchy on each host: the prefix and a
        key of its roles' names and work folders (two ssh labs on one kernel share the
        prefix ``ssh``), the same on every host, so that roles sharing a kernel share
        one folder and one removal."""
        if self._name is None:
            where = [(r, self.host.name(r), str(self.host.workdir(r))) for r in ROLES]
            key = hashlib.sha256(repr(where).encode()).hexdigest()[:8]
            self._name = f"{self.host.prefix}-{key}"
        return self._name

    # --- what a host has ---------------------------------------------------------------
    def found(self, role: str) -> Mechanism | str:
        """``role``'s host's accounting, or why it has none (asked there once)."""
        if role not in self._found:
            argv = [*self.host.python(role), "-m", "quicbed.roles.cgroups", "detect"]
            argv += ["--prefer", self.prefer] if self.prefer else []
            cp = self.host.on_host(role, argv)
            try:
                got = json.loads(cp.stdout)
            except json.JSONDecodeError:
                tail = (cp.stderr or cp.stdout).strip().splitlines()[-1:]
                got = {"why": f"its accounting could not be asked ({' '.join(tail)})"}
            mech = got.get("mechanism")
            self._found[role] = Mechanism(mech, got["mount"]) if mech else str(got.get("why"))
            self._cpuset[role] = got.get("cpuset") or {"kind": None, "why": "not asked"}
        return self._found[role]

    def mechanism(self, role: str) -> Mechanism | None:
        m = self.found(role)
        return m if isinstance(m, Mechanism) else None

    def check(self, roles: Sequence[str] = ENDPOINTS) -> None:
        """Refuse, naming the host and what it lacks, a testbed whose endpoints cannot
        account CPU per role, or whose hosts cannot pin its placement: before anything
        starts."""
        for role in roles:
            m = self.found(role)
            if not isinstance(m, Mechanism):
                raise QuicbedError(f"CPU per role: {self.host.name(role)} cannot account it: {m}")
        self.placement()

    # --- placement ----------------------------------------------------------------------
    def place(self, placement: str) -> None:
        """Pin each role's groups to CPUs (``--placement``: quicbed.roles.cpuaccounting's
        parse_placement); groups already made are moved at once (their processes with
        them), roles no longer named go back to every CPU."""
        self._placement = parse_placement(placement)
        wanted = self.placement()
        for role, group in list(self._placed):
            if role not in wanted:
                self._pin(role, group, "all")
                del self._placed[(role, group)]
        for role, group in sorted(self._made):
            if role in wanted:
                self._pin(role, group, wanted[role])

    def placement(self) -> dict[str, str]:
        """Per role, the CPUs its groups are pinned to (none: not pinned), resolved on
        the hosts: a name (``split``) by their CPUs; CPUs a host lacks, or a host that
        cannot pin, refused naming both."""
        p = self._placement
        if p == "none":
            return {}
        for role in ROLES:
            self.found(role)
        if p == "split":
            p = self._split()
        assert isinstance(p, dict)
        for role, want in p.items():
            cs = self._cpuset.get(role) or {}
            where = self.host.name(role)
            if cs.get("kind") is None:
                raise QuicbedError(
                    f"--placement {role}={want}: {where} cannot pin groups: {cs.get('why')}"
                )
            if not cgroups.cpu_list(want) <= cgroups.cpu_list(cs["cpus"]):
                raise QuicbedError(
                    f"--placement {role}={want}: {where}'s host has CPUs {cs['cpus']}"
                )
        return dict(p)

    def _split(self) -> dict[str, str]:
        """``split``: where the bridge shares its host with the endpoints, the emulator
        on the first CPU and server and client on the others; where it has a host of
        its own (a testbed's bridge node) nothing needs pinning."""
        hosts = self.hosts()
        if hosts["bridge"] != hosts["server"]:
            return {}
        cs = self._cpuset.get("bridge") or {}
        if cs.get("kind") is None:
            raise QuicbedError(
                f"--placement split: {self.host.name('bridge')} cannot pin groups: {cs.get('why')}"
            )
        cpus = sorted(cgroups.cpu_list(cs["cpus"]))
        if len(cpus) < 2:
            raise QuicbedError(
                f"--placement split: {self.host.name('bridge')}'s host has one CPU "
                f"({cs['cpus']}): nothing to split"
            )
        rest = ",".join(str(c) for c in cpus[1:])
        return {"bridge": str(cpus[0]), "server": rest, "client": rest}

    def _pin(self, role: str, group: str, cpus: str) -> str:
        argv = [*self.host.python(role), "-m", "quicbed.roles.cgroups", "place"]
        cp = self.host.on_host(role, [*argv, self.folder, group, cpus])
        try:
            got = json.loads(cp.stdout)
        except json.JSONDecodeError:
            got = {"error": (cp.stderr or cp.stdout).strip() or f"exit {cp.returncode}"}
        if "error" in got:
            raise QuicbedError(
                f"placement: cannot pin {group} to CPUs {cpus} on {self.host.name(role)}: "
                f"{got['error']}"
            )
        return str(got["procs"])

    def describe(self) -> dict[str, str]:
        """Per role, the accounting used (``cgroup1 /sys/fs/cgroup/cpuacct``) or why none,
        and the CPUs its groups are pinned to, if they are."""
        out = {}
        placed = self.placement()
        for role in ROLES:
            m = self.found(role)
            out[role] = f"{m.kind} {m.mount}" if isinstance(m, Mechanism) else f"none: {m}"
            if role in placed:
                out[role] += f", pinned to CPUs {placed[role]}"
        return out

    # --- joining -------------------------------------------------------------------------
    def make(self, role: str, group: str) -> None:
        """Make ``group`` on ``role``'s host now (a reading before its first process
        then reads zero, not "no group"); a no-op on a host without accounting."""
        mech = self.mechanism(role)
        if mech is not None:
            self._make(role, group, mech)

    def _make(self, role: str, group: str, mech: Mechanism) -> None:
        if (role, group) in self._made:
            return
        d = cgroups.group_dir(mech.mount, self.folder, group)
        counters = cgroups.counter_files(mech.kind, mech.mount, self.folder, group)
        script = f"mkdir -p {shlex.quote(d)} && cat {shlex.join(counters)} >/dev/null"
        cp = self.host.on_host(role, ["sh", "-c", script])
        if cp.returncode != 0:
            raise QuicbedError(
                f"CPU per role: cannot make the group {d} on {self.host.name(role)}: "
                f"{cp.stderr.strip() or 'no output'}"
            )
        cpus = self.placement().get(role)
        if cpus is not None:
            self._placed[(role, group)] = self._pin(role, group, cpus)
        self._made.add((role, group))

    @contextmanager
    def joining(self, role: str, group: str) -> Iterator[None]:
        """Processes spawned on ``role`` inside this block join ``group`` there (made
        on first use); a host without accounting starts them as they are."""
        mech = self.mechanism(role)
        if mech is None:
            yield
            return
        self._make(role, group, mech)
        before = self._active.get(role)
        self._active[role] = group
        try:
            yield
        finally:
            if before is None:
                self._active.pop(role, None)
            else:
                self._active[role] = before

    def wrap(self, role: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as it must be spawned on ``role``: joining the active group first."""
        group = self._active.get(role)
        mech = self.mechanism(role) if group else None
        if group is None or mech is None:
            return list(argv)
        procs = [cgroups.procs_file(mech.mount, self.folder, group)]
        if (role, group) in self._placed and self._placed[(role, group)] not in procs:
            procs.append(self._placed[(role, group)])  # v1: the cpuset hierarchy's own
        joins = " && ".join(f"echo $$ >{shlex.quote(p)}" for p in procs)
        return ["sh", "-c", f'{joins} && exec "$@"', "quicbed-cgroup", *argv]

    # --- reading -------------------------------------------------------------------------
    def read(self, groups: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Reading | str]:
        """Each (role, group)'s counters now, or why there are none: one command per
        host (``grep -H`` prints every file's lines with its name)."""
        out: dict[tuple[str, str], Reading | str] = {}
        files: dict[tuple[str, str], list[str]] = {}
        for role, group in groups:
            mech = self.mechanism(role)
            where = self.host.name(role)
            if mech is None:
                out[(role, group)] = f"{where} has no CPU accounting: {self.found(role)}"
            elif (role, group) not in self._made:
                out[(role, group)] = f"no process of quicbed's ran in group {group} on {where}"
            else:
                t = self.folder
                files[(role, group)] = cgroups.counter_files(mech.kind, mech.mount, t, group)
        lines: dict[str, list[str]] = {}
        errors: dict[str, str] = {}
        hosts = self.hosts()
        for host in hosts:
            mine = [f for (role, _), fs in files.items() if hosts[role] == host for f in fs]
            if not mine:
                continue
            cp = self.host.on_host(host, ["grep", "-H", "", *mine])
            errors[host] = cp.stderr.strip()
            for line in cp.stdout.splitlines():
                path, _, value = line.partition(":")
                lines.setdefault(path, []).append(value)
        for (role, group), fs in files.items():
            mech = self.mechanism(role)
            assert mech is not None
            texts = {PurePosixPath(f).name: "\n".join(lines.get(f, [])) for f in fs}
            try:
                total, user, system = cgroups.parse_counters(mech.kind, texts)
            except (KeyError, ValueError):
                out[(role, group)] = (
                    f"the counters of group {group} on {self.host.name(role)} could not be "
                    f"read: {errors.get(hosts[role]) or 'no output'}"
                )
                continue
            out[(role, group)] = Reading(total, user, system)
        return out

    def pids(self, role: str, group: str) -> list[int]:
        """The processes in ``group`` on ``role``'s host now (none: not made there)."""
        mech = self.mechanism(role)
        if mech is None or (role, group) not in self._made:
            return []
        procs = cgroups.procs_file(mech.mount, self.folder, group)
        cp = self.host.on_host(role, ["cat", procs])
        return [int(x) for x in cp.stdout.split() if x.isdigit()]

    # --- removal ------------------------------------------------------------------------
    def hosts(self) -> dict[str, str]:
        """Per role, the role that stands for its host: roles on one kernel (one boot
        id) share their control groups. A host without a boot id (a FreeBSD bridge)
        stands for itself. Asked once."""
        if self._hosts is None:
            seen: dict[str, str] = {}
            self._hosts = {}
            for role in ROLES:
                cp = self.host.on_host(role, ["cat", "/proc/sys/kernel/random/boot_id"])
                boot = cp.stdout.strip() if cp.returncode == 0 else ""
                self._hosts[role] = seen.setdefault(boot, role) if boot else role
        return self._hosts

    def remove(self) -> list[str]:
        """Remove this testbed's groups on every host, and whatever still runs in them
        (a killed run's processes); what was removed, or could not be."""
        removed: list[str] = []
        for role in sorted(set(self.hosts().values())):
            if self.mechanism(role) is None:
                continue  # no accounting there: nothing of ours can be either
            argv = [
                *self.host.python(role),
                "-m",
                "quicbed.roles.cgroups",
                "remove",
                self.folder,
            ]
            cp = self.host.on_host(role, argv)
            try:
                got = json.loads(cp.stdout)
            except json.JSONDecodeError:
                got = {"error": (cp.stderr or cp.stdout).strip() or f"exit {cp.returncode}"}
            if isinstance(got, list):
                removed += [f"{x} on {self.host.name(role)}" for x in got]
            else:
                removed.append(f"cgroups on {self.host.name(role)} NOT removed: {got.get('error')}")
        self._made.clear()
        self._active.clear()
        self._placed.clear()
        return removed
