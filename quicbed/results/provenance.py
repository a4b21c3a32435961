"""Provenance: what software and machine produced a result, stored with every attempt.

Collected from the programs themselves (``--version``, Go's build info, the SHA-256
of each program's file), never typed in: a replication package must say what really
ran. It runs once per attempt: one ``--version`` or digest per program, kept between
attempts while the program's files stay the same (quicbed.results.software_cache), and
files under /proc. On the ssh testbed each component is asked on the host it runs on
(Chromium on the client, Apache on the server), and every host's kernel, OS, CPU and
sysctls are recorded.

What of a record can change a result, and so tells one set-up from another, is one
rule here (setup_identity): the report counts set-ups by it, and the software check
(quicbed.results.folder) compares the software part of it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from quicbed import __version__
from quicbed.backends import described
from quicbed.errors import QuicbedError
from quicbed.identity import testbed_id
from quicbed.paths import REPO_ROOT, Run, program_build
from quicbed.results.software_cache import SoftwareCache
from quicbed.roles import ROLES

if TYPE_CHECKING:
    from quicbed.servers.webserver import WebServer
    from quicbed.testbed.lifecycle import Testbed


def _out(argv: list[str], timeout: float = 20) -> str | None:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    text = (cp.stdout or cp.stderr).strip()
    return text if cp.returncode == 0 and text else None


def _git_now() -> dict[str, Any]:
    sha = _out(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"])
    dirty = _out(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"sha": sha, "dirty": bool(dirty)}


@functools.cache
def _git_at_start() -> dict[str, Any]:
    return _git_now()


def git_state() -> dict[str, Any]:
    """The checkout as this process first saw it: the code it loaded and runs. A commit
    or an edit during a sweep of hours does not relabel its later cells' software;
    where the checkout moved since, ``now`` says where to (the cell still ran the
    code of ``sha``, unless a module was first imported after the move)."""
    start = _git_at_start()
    now = _git_now()
    return dict(start) if now == start else start | {"now": now}


def ask(tb: Testbed | None, role: str) -> Run:
    """How to ask ``role``'s machine: this one for the local testbed, else over the testbed."""
    if tb is None or tb.controller_is_host:
        return _out

    def run(argv: list[str]) -> str | None:
        try:
            cp = tb.exec(role, argv, check=False, timeout=30)
        except QuicbedError:
            return None
        text = (cp.stdout or cp.stderr).strip()
        return text if cp.returncode == 0 and text else None

    return run


#: the link emulator every cell's link runs through (quicbed.shapers)
LINK_EMULATOR = "quicbed-linkem"
#: the client of every transfer (bulk and compete cells: quicbed.run.bulk.CLIENT)
BULK_CLIENT = "quicbed-bulk"
#: the fields of a component's record that say which build it is: what it reports as its
#: version, the digest of its files, the module versions compiled in. Never where it
#: lies (``path``): the same build elsewhere is the same software
BUILD_FIELDS = ("version", "sha256", "files", "deps")


def _bindir(tb: Testbed | None, role: str) -> PurePosixPath:
    """quicbed's build/bin on ``role``'s machine: where the testbed runs our programs from
    (on this machine, as quicbed.paths.bin_path finds them: QUICBED_BIN_DIR first)."""
    if tb is None or tb.controller_is_host:
        return PurePosixPath(os.environ.get("QUICBED_BIN_DIR", str(REPO_ROOT / "build" / "bin")))
    return PurePosixPath(tb.repo_dir(role)) / "build" / "bin"


def software(tb: Testbed | None = None, cache: SoftwareCache | None = None) -> dict[str, Any]:
    """Every component that can touch a measurement, asked where it runs, by its version
    and the digest of its build: quicbed, the link emulator, the transfer client, every
    browser and every stack's server (each stack probes its own: WebServer.software).
    All are recorded, whichever a cell uses; the software check compares the ones a cell
    uses (quicbed.results.folder.used_software).

    A component's record is kept between attempts while the files it comes from stay the
    same (quicbed.results.software_cache; ``cache``: the one to use, else the
    controller's): each is probed again the moment one of them changes."""
    from quicbed.client import browsers
    from quicbed.servers import stacks

    kept = cache or SoftwareCache()

    def probed(role: str, name: str, probe: Callable[[Run], Any], given: str = "") -> Any:
        where = "this machine" if tb is None or tb.controller_is_host else tb.name(role)
        return kept.probed(ask(tb, role), f"{where}\t{name}\t{given}", probe)

    client = ask(tb, "client")
    iperf = client(["iperf3", "--version"])
    out: dict[str, Any] = {
        "quicbed": __version__,
        "python": sys.version.split()[0],
        "iperf3": iperf.splitlines()[0] if iperf else None,
        "node": client(["node", "--version"]),
    }
    for program, role in ((LINK_EMULATOR, "bridge"), (BULK_CLIENT, "client")):
        path = str(_bindir(tb, role) / program)
        out[program] = probed(role, program, functools.partial(program_build, path=path), path)
    for key, browser in browsers().items():
        out[key] = probed("client", key, browser.software)
    bindir = _bindir(tb, "server")
    for cls in stacks().values():
        name = cls.software_name
        if name and name not in out:  # stacks that run one program probe it once
            probe = functools.partial(cls.software, bindir=bindir)
            out[name] = probed("server", name, probe, str(bindir))
    kept.save()
    return out


def stack_installed(tb: Testbed | None, cls: type[WebServer]) -> bool:
    """Whether the testbed's server has ``cls``'s program, as its software probe finds
    it (a stack without a program to probe counts as installed)."""
    if not cls.software_name:
        return True
    return cls.software(ask(tb, "server"), _bindir(tb, "server")) is not None


# --- what identifies a set-up ------------------------------------------------------------
def component_identity(value: Any) -> dict[str, Any] | None:
    """Which build of one component a software record names (its BUILD_FIELDS), or None
    where the component was not installed.

    Records of earlier quicbed versions are read as what they are: a version string
    (chromium, apache, quicbed itself) is a version, and a sweep file then kept a Go
    program's module versions alone (module paths as keys), which are its ``deps``.
    An identity read again is itself."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value or "path" in value or value.keys() & set(BUILD_FIELDS):
            return {k: value[k] for k in BUILD_FIELDS if k in value}
        return {"deps": dict(value)}
    return {"version": value}


def software_identity(software: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every component of a software record (provenance's ``software``, or a sweep file's)
    by the build it names (component_identity)."""
    return {k: component_identity(v) for k, v in (software or {}).items()}


#: sysctls quicbed itself sets per cell (quicbed.link.tuning: the socket buffers of 2 x
#: the condition's BDP, only ever raised on a host, and the cell's TCP CC; on an ssh
#: testbed on the hosts themselves), and the CC modules a cell's CC loads: their value
#: when an attempt starts says which cells ran before it, not what the set-up is. Each
#: cell's receipt records what it ran with
TUNED_PER_CELL = (
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
)
#: what of a machine's record can change a result: its kernel, OS and hardware (not its
#: name: the same hardware under another name measures the same)
MACHINE_FIELDS = ("kernel", "os", "cpu", "cores", "node_type")


def setup_identity(
    prov: Mapping[str, Any] | None, receipt: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What of an attempt's provenance (and receipt) can change its result: two attempts
    with equal identities were measured by one set-up. The one rule for the report's
    set-ups and, through the software, for the software check (quicbed.results.folder).

    Kept: every software component's build (component_identity: versions, digests,
    module versions), quicbed's commit and whether its checkout was dirty, each
    machine's kernel, OS and hardware (MACHINE_FIELDS; on an ssh testbed each node's),
    their sysctls but those a cell sets itself (TUNED_PER_CELL), the testbed's kind and
    its nodes' hardware type and image, the roles' CPU placement where pinned, the trace
    level and instruments (capture runs beside the loads), and from the receipt, where
    given, the NIC offloads and the shaper. Dropped: when and by which command an
    attempt ran, process IDs, start times, addresses, user names and paths of every
    kind, the arms' servers' start records (``components``: their settings are the
    cell's, their builds are in the software), the controller's Python packages (they
    draw and count, they load nothing), the CPU accounting used (``cpu_accounting``:
    it reads, it changes nothing), and where the checkout moved to since (``git.now``).
    The rule keeps what it names: a key a later quicbed adds to a record counts once it
    is named here."""
    p = prov or {}
    out: dict[str, Any] = {}
    if "software" in p:
        out["software"] = software_identity(p["software"])
    git = p.get("git") or {}
    if git:
        out["git"] = {k: git[k] for k in ("sha", "dirty") if k in git}
    if "machine" in p:
        out["machine"] = _machine_identity(p["machine"])
    if "sysctls" in p:
        out["sysctls"] = _sysctl_identity(p["sysctls"])
    desc = p.get("testbed") or {}
    if desc:
        out["testbed"] = {
            "kind": desc.get("kind"),
            "nodes": {
                role: {k: n.get(k) for k in ("hardware_type", "image")}
                for role, n in sorted((desc.get("nodes") or {}).items())
            },
        }
    if "nodes" in p:
        out["nodes"] = {
            role: {
                "machine": _machine_identity(n.get("machine")),
                "sysctls": _sysctl_identity(n.get("sysctls")),
            }
            for role, n in sorted((p["nodes"] or {}).items())
        }
    if p.get("cpu_placement"):  # roles pinned to CPUs (--placement); absent: not pinned
        out["cpu_placement"] = p["cpu_placement"]
    traces = p.get("traces") or {}
    if traces:
        out["traces"] = {k: traces[k] for k in ("level", "instruments") if k in traces}
    if receipt is not None:
        shaper = receipt.get("shaper") or {}
        out["link"] = {
            "offloads": (receipt.get("tuning") or {}).get("offloads"),
            "shaper": {k: shaper[k] for k in ("shaper", "emulator") if k in shaper},
        }
    return out


def _machine_identity(machine: Mapping[str, Any] | None) -> dict[str, Any]:
    m = machine or {}
    return {k: m[k] for k in MACHINE_FIELDS if k in m}


def _sysctl_identity(sysctls: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (sysctls or {}).items() if k not in TUNED_PER_CELL}


#: host sysctls (root network namespace) that shape TCP and UDP behaviour; the values
#: set per testbed namespace are read back into each fidelity receipt (``tuning``)
SYSCTLS = (
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
    "net.core.default_qdisc",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_fastopen",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.udp_rmem_min",
    "net.ipv4.udp_wmem_min",
)


def sysctls() -> dict[str, str | None]:
    """The host's values of :data:`SYSCTLS`, read from /proc/sys (no subprocess)."""
    out: dict[str, str | None] = {}
    for key in SYSCTLS:
        try:
            text = (Path("/proc/sys") / key.replace(".", "/")).read_text()
            out[key] = " ".join(text.split())
        except OSError:
            out[key] = None
    return out


def python_packages() -> dict[str, str]:
    """Every installed Python distribution and its version (what ``pip freeze`` says),
    read from package metadata: a replication needs the versions that really ran,
    which may differ from requirements.txt."""
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def machine(run: Run | None = None) -> dict[str, Any]:
    """This machine (or, with ``run``, the machine ``run`` asks: a testbed host)."""
    if run is None:
        return {
            "hostname": platform.node(),
            "kernel": platform.release(),
            "os": _os_release(_read("/etc/os-release")),
            "cpu": _cpu(_read("/proc/cpuinfo")),
            "cores": _out(["nproc"]),
        }
    return {
        "hostname": run(["uname", "-n"]),
        "kernel": run(["uname", "-r"]),
        "os": _os_release(run(["cat", "/etc/os-release"])) or run(["uname", "-sr"]),
        "cpu": _cpu(run(["cat", "/proc/cpuinfo"])) or run(["sysctl", "-n", "hw.model"]),
        "cores": run(["nproc"]) or run(["sysctl", "-n", "hw.ncpu"]),
        # Emulab writes the node's hardware type here (d430, d710, ...)
        "node_type": run(["cat", "/var/emulab/boot/nodetype"]),
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _cpu(cpuinfo: str | None) -> str | None:
    for line in (cpuinfo or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def _os_release(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return None


def node_sysctls(run: Run) -> dict[str, str | None]:
    """:data:`SYSCTLS` on a testbed host, in one call (``-e``: unknown keys are skipped)."""
    text = run(["sysctl", "-e", *SYSCTLS]) or ""
    found = {}
    for line in text.splitlines():
        key, sep, val = line.partition(" = ")
        if sep:
            found[key.strip()] = " ".join(val.split())
    return {k: found.get(k) for k in SYSCTLS}


def collect(tb: Testbed | None = None) -> dict[str, Any]:
    """Everything about what produced an attempt; ``tb`` adds the testbed and its hosts."""
    out: dict[str, Any] = {
        "collected": datetime.now(UTC).isoformat(),
        "git": git_state(),
        "software": software(tb),
        "machine": machine(),
        "sysctls": sysctls(),
        "python_packages": python_packages(),
        "argv": sys.argv,
    }
    if tb is not None:
        out["testbed"] = tb.describe()
        out["cpu_accounting"] = tb.cpu.describe()  # per role: the cgroup kind, or why none
        placed = tb.cpu.placement()
        if placed:  # only where pinned: an attempt that pins nothing has the identity it had
            out["cpu_placement"] = placed
        if not tb.controller_is_host:  # the controller is not where the measurement ran
            out["nodes"] = {}
            for role in ROLES:
                run = ask(tb, role)
                out["nodes"][role] = {"machine": machine(run), "sysctls": node_sysctls(run)}
    return out


def measured_on(provenance: dict[str, Any] | None) -> dict[str, Any]:
    """Which testbed measured an attempt, from its provenance: its identity, a label, its
    hardware (Emulab's node type where the nodes report one, else the CPU model), the
    kernels and the OS images. A sweep over several testbeds reports by these."""
    prov = provenance or {}
    desc = prov.get("testbed") or {}
    if not described(desc.get("kind")).controller_is_host:  # each node's own machine
        label = desc.get("source") or testbed_id(desc)
        nodes = prov.get("nodes") or {}
        descnodes = desc.get("nodes") or {}

        def per_role(get: Any) -> str | None:
            vals = {r: get(r) for r in ROLES if get(r)}
            if not vals:
                return None
            if len(set(vals.values())) == 1:
                return str(next(iter(vals.values())))
            return ", ".join(f"{r} {v}" for r, v in vals.items())

        def mach(key: str) -> Any:
            return lambda r: ((nodes.get(r) or {}).get("machine") or {}).get(key)

        hardware = per_role(
            lambda r: (
                (descnodes.get(r) or {}).get("hardware_type")
                or mach("node_type")(r)
                or mach("cpu")(r)
            )
        )
        kernel = per_role(mach("kernel"))
        image = per_role(lambda r: (descnodes.get(r) or {}).get("image") or mach("os")(r))
    else:
        m = prov.get("machine") or {}
        label = testbed_id(desc)
        hardware, kernel, image = m.get("cpu"), m.get("kernel"), m.get("os")
    return {
        "id": testbed_id(desc),
        "label": label,
        "hardware": hardware or "unknown",
        "kernel": kernel,
        "image": image,
    }
