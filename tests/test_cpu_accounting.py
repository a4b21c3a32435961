"""CPU per role: control groups found, joined before a process forks, read, removed.

The parsing and the summaries run anywhere; the groups themselves are real ones on
this machine (cgroup v1 cpuacct, and the cgroup2 tree it mounts beside it), and the
cells are real cells.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from conftest import SharedLinks, reads_well, scheduled

from quicbed.analysis.cpusummary import summary
from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results.cpuuse import CpuTime, CpuUse
from quicbed.roles import cgroups
from quicbed.roles.cpuaccounting import CpuGroups
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed
from quicbed.testbed.sshlab import cgroup_mounts

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup {v1} cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 {v2} cgroup2 rw,relatime 0 0
"""
#: the cells' link: the suite's shared 50 Mbit/s, 20 ms one (conftest.SharedLinks)
COND = make_condition(rate_mbit=50, rtt_ms=20)
UNIFIED = "cgroup2 {v2} cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    v1, v2 = tmp_path / "cpuacct", tmp_path / "unified"
    v1.mkdir()
    v2.mkdir()
    for name in cgroups.COUNTERS["cgroup1"]:
        (v1 / name).write_text("0\n")
    return v1, v2


def test_a_hybrid_host_accounts_in_cpuacct_a_unified_one_in_cgroup2(tmp_path: Path) -> None:
    v1, v2 = _tree(tmp_path)
    hybrid = HYBRID.format(v1=v1, v2=v2)
    assert cgroups.detect(mounts_text=hybrid) == {"mechanism": "cgroup1", "mount": str(v1)}
    assert cgroups.detect("cgroup2", hybrid) == {"mechanism": "cgroup2", "mount": str(v2)}
    unified = UNIFIED.format(v2=v2)
    assert cgroups.detect(mounts_text=unified) == {"mechanism": "cgroup2", "mount": str(v2)}
    assert "no cgroup1 hierarchy" in cgroups.detect("cgroup1", unified)["why"]
    # a v1 cpu hierarchy without cpuacct does not account
    none = cgroups.detect(mounts_text="cgroup /x cgroup rw,cpu 0 0\nproc /proc proc rw 0 0\n")
    assert none["mechanism"] is None and "neither" in none["why"]
    assert "unknown accounting kind 'v3'" in cgroups.detect("v3", hybrid)["why"]


def test_counters_are_read_in_nanoseconds_whatever_the_kind() -> None:
    v1 = {
        "cpuacct.usage": "1600250\n",
        "cpuacct.usage_user": "1500000\n",
        "cpuacct.usage_sys": "0\n",
    }
    assert cgroups.parse_counters("cgroup1", v1) == (1_600_250, 1_500_000, 0)
    stat = "usage_usec 1700\nuser_usec 1500\nsystem_usec 200\nnice_usec 0\n"
    assert cgroups.parse_counters("cgroup2", {"cpu.stat": stat}) == (
        1_700_000,
        1_500_000,
        200_000,
    )
    with pytest.raises(KeyError):
        cgroups.parse_counters("cgroup2", {"cpu.stat": "usage_usec 1\n"})


def test_the_ssh_lab_mounts_the_accounting_hierarchies_as_the_host_has_them() -> None:
    hybrid = HYBRID.format(v1="/sys/fs/cgroup/cpuacct", v2="/sys/fs/cgroup/unified")
    cmds = cgroup_mounts(hybrid).split(" && ")
    assert cmds[0] == "mount -t tmpfs -o rw,relatime,mode=755 tmpfs /sys/fs/cgroup"
    mounted = [c.split()[-1] for c in cmds if c.startswith("mount -t cgroup")]
    assert mounted == ["/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/unified"]
    # cgroup2's options are its one superblock's: the host's own, nsdelegate included
    unified = cgroup_mounts(UNIFIED.format(v2="/sys/fs/cgroup"))
    assert unified == (
        "mkdir -p /sys/fs/cgroup && mount -t cgroup2 -o "
        "rw,nosuid,nodev,noexec,relatime,nsdelegate cgroup2 /sys/fs/cgroup"
    )


def test_the_summary_is_cpu_per_load_and_per_mb() -> None:
    def use(server: float, client: float | None, wall: float) -> CpuUse:
        roles = {"server": CpuTime(total_ms=server, user_ms=server * 0.75, system_ms=server * 0.25)}
        if client is not None:
            roles["client"] = CpuTime(total_ms=client, user_ms=client, system_ms=0)
        return CpuUse(wall_ms=wall, roles=roles, missing={"bridge": "netem: in the kernel"})

    s = summary([(use(100, 40, 1000), 10_000_000), (use(300, None, 1000), 30_000_000)])
    assert s["server"]["n"] == 2 and s["server"]["total_ms"] == pytest.approx(200)
    assert s["server"]["user_ms"] == pytest.approx(150)
    assert s["server"]["ms_per_mb"] == pytest.approx(400 / 40)
    assert s["server"]["core_share"] == pytest.approx(0.2)
    assert s["client"]["n"] == 1 and s["client"]["ms_per_mb"] == pytest.approx(4.0)
    assert s["bridge"] == {"n": 0, "missing": "netem: in the kernel"}


# --- real groups -----------------------------------------------------------------------
BURN = """\
import os, sys, time
pid = os.fork()
who = "-child" if pid == 0 else "-parent"
open(sys.argv[1] + who, "w").write(open("/proc/self/cgroup").read())
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
if pid:
    os.waitpid(pid, 0)
"""


@pytest.mark.root
@pytest.mark.parametrize("prefer", [None, "cgroup2"])
def test_a_process_and_what_it_forks_are_counted_in_its_group(
    testbed: LocalTestbed, tmp_path: Path, prefer: str | None
) -> None:
    """The process joins before it execs: the child it forks at once is in the group
    too, and both children's CPU is in the group's counters (cgroup v1 cpuacct, and
    the cgroup2 tree this host mounts beside it)."""
    tb = testbed
    tb.cpu.prefer = prefer
    mech = tb.cpu.mechanism("server")
    assert mech is not None and mech.kind == (prefer or "cgroup1")
    before = tb.cpu.read([("server", "server-x")])
    assert "no process of quicbed's ran in group server-x" in str(before[("server", "server-x")])
    with tb.cpu.joining("server", "server-x"):
        p = tb.spawn(
            "server",
            [sys.executable, "-c", BURN, str(tmp_path / "cg")],
            log=PurePosixPath(tmp_path / "log"),
        )
    assert p.wait(30) == 0, (tmp_path / "log").read_text()
    group = f"/{cgroups.TOP}/{tb.cpu.folder}/server-x"
    for who in ("parent", "child"):
        lines = (tmp_path / f"cg-{who}").read_text().splitlines()
        mine = [ln for ln in lines if ln.endswith(group)]
        assert mine, f"the {who} was not in {group}: {lines}"
    got = tb.cpu.read([("server", "server-x")])[("server", "server-x")]
    assert not isinstance(got, str), got
    assert got.total_ns / 1e9 >= 0.6  # 2 x 0.3 s of process time, counted exactly
    assert (got.user_ns + got.system_ns) / 1e9 >= 0.5  # the tick's sample of it
    removed = tb.down()
    assert f"{cgroups.TOP}/{tb.cpu.folder} (server-x)" in " ".join(removed), removed
    assert not Path(mech.mount, cgroups.TOP, tb.cpu.folder).exists()


@pytest.mark.root
def test_what_a_killed_run_left_in_its_groups_is_stopped_by_the_next_owner(
    prefix: str,
) -> None:
    """A process left running in a group (here one outside the namespaces, which
    ``down`` stops by themselves) is stopped by its PID when the groups go."""
    tb = LocalTestbed(prefix)
    tb.up()
    with tb.cpu.joining("client", "client-x"):
        argv = tb.cpu.wrap("client", ["sleep", "300"])
    orphan = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 5
        mech = tb.cpu.mechanism("client")
        assert mech is not None
        procs = Path(cgroups.procs_file(mech.mount, tb.cpu.folder, "client-x"))
        while str(orphan.pid) not in procs.read_text().split():
            assert time.monotonic() < deadline, "the sleep never joined its group"
            time.sleep(0.02)
        removed = LocalTestbed(prefix).down()  # the next owner, another object
        assert f"pid {orphan.pid} in cgroup" in " ".join(removed), removed
        assert orphan.wait(5) is not None
        assert not procs.parent.exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()


class _Bare:
    """A host as the groups see one, whose commands run where no cgroup hierarchy is
    mounted (a private mount namespace with them unmounted): a real host without
    accounting, as a container without cgroups is."""

    prefix = "bare"

    def name(self, role: str) -> str:
        return f"bare-{role}"

    def on_host(self, role: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        hide = 'umount -R /sys/fs/cgroup 2>/dev/null; exec "$@"'
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, "sh", *argv],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )

    def python(self, role: str) -> list[str]:
        return [sys.executable]

    def workdir(self, role: str) -> PurePosixPath:
        return PurePosixPath("/nonexistent")


@pytest.mark.root
def test_a_host_without_accounting_is_refused_by_name(root: None) -> None:
    groups = CpuGroups(_Bare())
    with pytest.raises(QuicbedError) as e:
        groups.check()
    assert str(e.value) == (
        "CPU per role: bare-server cannot account it: neither a cgroup v1 hierarchy with "
        "cpuacct nor a cgroup v2 hierarchy is mounted (see /proc/mounts)"
    )
    assert groups.describe()["bridge"].startswith("none: neither")
    # nothing to join there: a spawn is left as it is, and nothing is read
    with groups.joining("bridge", "emulator"):
        assert groups.wrap("bridge", ["x"]) == ["x"]
    assert "bare-bridge has no CPU accounting" in str(groups.read([("bridge", "emulator")]))


# --- cells -----------------------------------------------------------------------------
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.built
def test_every_flow_stores_cpu_per_role(traced_bulk: dict[str, Any]) -> None:
    """A bulk cell (the suite's traced one, conftest.traced_bulk): each flow's server,
    client and emulator CPU, from its own group; the report's cpu.csv per arm and role.
    (The groups go with the testbed, which conftest.SharedLinks checks when it takes its
    links down.)"""
    from quicbed.report.build import build

    r, out = traced_bulk["result"], traced_bulk["out"]
    assert len([x for x in r.runs if not x.replacement]) == 4  # and any replacement
    for run in r.runs:
        cpu = run.flow.cpu
        assert cpu is not None and cpu.missing == {}, cpu
        assert cpu.groups == {
            "server": f"server-{run.arm}",
            "client": f"client-{run.arm}",
            "bridge": "emulator",
        }
        for role, t in cpu.roles.items():
            assert t.total_ms > 0, (run.arm, role, t)
        # no role used more than this machine's two cores over the flow
        assert all(t.total_ms < 2 * cpu.wall_ms for t in cpu.roles.values())
        # each role's counters, from its own namespace; the ACK ratio of a QUIC flow
        counters = run.flow.counters
        assert set(counters) == {"server", "client", "bridge"}
        assert counters["client"].ifaces == ["eth0"]
        assert counters["bridge"].ifaces == ["cli", "srv"]
        ack = run.flow.ack_ratio()
        if run.arm == "h3":
            assert ack is not None and 0.01 < ack < 1, ack
            assert counters["client"].udp_in_datagrams > 1000
        else:
            assert ack is None
    rep = build(out)
    rows = {(c["arm"], c["role"]): c for c in rep.cpu.rows}
    assert set(rows) == {(a, role) for a in ("h2", "h3") for role in ("server", "client", "bridge")}
    assert all(c["n"] == 2 and c["ms_per_mb"] > 0 for c in rows.values())
    assert all(c["udp_rcvbuf_errors"] is not None for c in rows.values())
    table = (out / "report" / "transfers.csv").read_text().splitlines()
    header = table[0].split(",")
    h3 = dict(zip(header, next(x for x in table if ",h3," in x).split(","), strict=True))
    assert 0 < float(h3["ack_ratio_mean"]) < 1 and float(h3["cpu_server_ms_per_mb"]) > 0
    assert h3["udp_rcvbuf_errors_client"] != ""
    assert (out / "report" / "cpu.csv").exists()
    assert "CPU per role" in (out / "report" / "index.html").read_text()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_every_page_load_stores_cpu_per_role(shared_links: SharedLinks, tmp_path: Path) -> None:
    """A page cell: each load's server, browser and emulator CPU (the browser's
    renderers and GPU process forked into its group), and the accounting recorded."""
    from quicbed.results.cpuuse import load_cpu
    from quicbed.results.store import Store

    cfg = make_cell(condition=COND, page="100kb", runs=2)
    r = shared_links.run_cell(cfg, tmp_path / "r")
    assert r.status == "done", r.problem
    store = Store(tmp_path / "r")
    runs = scheduled(store.runs(r.cell_id, r.attempt))
    prov = store.attempt(r.cell_id, r.attempt).provenance
    store.close()
    assert len(runs) == 6
    for run in runs:
        cpu = load_cpu(run.detail)
        assert cpu is not None and cpu.missing == {}, cpu
        assert set(cpu.roles) == {"server", "client", "bridge"}
        assert cpu.roles["client"].total_ms > 0 and cpu.roles["server"].total_ms > 0
        assert set(run.detail["counters"]) == {"server", "client", "bridge"}
    assert prov is not None and prov["cpu_accounting"]["server"].startswith("cgroup1 ")


# --- placement -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("server=1,server=0", "role server given twice"),
        ("browser=1", "'browser=1' is not role=CPUs"),
        ("server", "'server' is not role=CPUs"),
        ("server=1-0", "'1-0' is not a CPU list"),
        ("server=x", "'x' is not a CPU list"),
    ],
)
def test_a_bad_placement_is_refused_by_name(text: str, error: str) -> None:
    from quicbed.roles.cpuaccounting import parse_placement

    with pytest.raises(QuicbedError, match=error):
        parse_placement(text)
    assert parse_placement("bridge=0,server=1,client=1-1") == {
        "bridge": "0",
        "server": "1",
        "client": "1-1",
    }
    assert parse_placement("split") == "split"


def _allowed(pid: int) -> str:
    """The CPUs ``pid`` may run on, once it has exec'd its program (the join is first)."""
    deadline = time.monotonic() + 5
    while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
        assert time.monotonic() < deadline, "the process never exec'd"
        time.sleep(0.01)
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(x.split()[1] for x in status if x.startswith("Cpus_allowed_list"))


@pytest.mark.root
def test_split_pins_the_emulator_apart_from_the_endpoints(testbed: LocalTestbed) -> None:
    """``split`` on this 2-CPU host: the emulator's group on CPU 0, the server's and
    client's on 1, from the process's start (it joins the cpuset before it execs);
    placement none moves the running processes back to every CPU; the cpuset groups
    go with the testbed."""
    tb = testbed
    if len(cgroups.cpu_list(cgroups.detect_cpuset()["cpus"])) != 2:
        pytest.skip("written for this 2-CPU machine")
    tb.cpu.place("split")
    assert tb.cpu.placement() == {"bridge": "0", "server": "1", "client": "1"}
    assert tb.cpu.describe()["bridge"].endswith("pinned to CPUs 0")
    procs = {}
    for role, group in (("server", "server-x"), ("bridge", "emulator")):
        with tb.cpu.joining(role, group):
            procs[role] = tb.spawn(role, ["sleep", "30"])
    assert _allowed(procs["server"].pid) == "1" and _allowed(procs["bridge"].pid) == "0"
    tb.cpu.place("none")
    assert _allowed(procs["server"].pid) == "0-1" and tb.cpu.placement() == {}
    for p in procs.values():
        p.stop()
    removed = " ".join(tb.down())
    assert f"cpuset/{cgroups.TOP}/{tb.cpu.folder} (emulator, server-x)" in removed


@pytest.mark.root
def test_cpus_a_host_lacks_are_refused_by_name(testbed: LocalTestbed) -> None:
    tb = testbed
    have = cgroups.detect_cpuset()["cpus"]
    beyond = max(cgroups.cpu_list(have)) + 1
    with pytest.raises(QuicbedError) as e:
        tb.cpu.place(f"server={beyond}")  # the text is fine; the host decides
    assert (
        str(e.value) == f"--placement server={beyond}: {tb.name('server')}'s host has CPUs {have}"
    )


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.built
@pytest.mark.browser  # the report check renders its report
def test_every_compete_repetition_stores_cpu_per_arm_and_role(
    traced_compete: dict[str, Any],
) -> None:
    """A compete cell (the suite's traced one, conftest.traced_compete): per repetition
    and arm, its server's and its flows' clients' CPU and the emulator's; the
    repetition's counters; each flow's ACK ratio where QUIC."""
    from quicbed.report.build import build

    r, out = traced_compete["result"], traced_compete["out"]
    for run in r.runs:
        assert set(run.cpu) == {"h3", "h2"}
        for arm, use in run.cpu.items():
            assert use.missing == {} and all(t.total_ms > 0 for t in use.roles.values()), arm
        assert set(run.counters) == {"server", "client", "bridge"}
        h3 = next(f for f in run.flows if f.arm == "h3")
        assert h3.ack_ratio() is not None
    items = r.cpu_items()
    assert len(items["h3"]) == 2 and len(items["h2"]) == 2
    assert r.summary["h3"].ack_ratio_mean is not None
    build(out)  # a folder of one compete cell
    reads_well(out / "report", "compete")
