"""CPU accounting groups on one host: which kind it has, where they are, their removal.

quicbed puts each role's processes in a control group of their own (each arm's
server, each arm's browser or bulk client, the link emulator), so that the CPU time
a load or flow cost each of them is read from the kernel's counters of the group,
children and exited processes included (quicbed.roles.cpuaccounting drives this from the
controller). Two kinds, found on the host, never assumed:

- ``cgroup1``: a cgroup v1 hierarchy with the ``cpuacct`` controller (Debian 12 and
  Ubuntu 18.04/22.04 booted in the hybrid layout; this machine): ``cpuacct.usage``
  (the groups' run time, exact) and ``cpuacct.usage_user``/``usage_sys`` (its split,
  sampled at the scheduler's tick), in nanoseconds;
- ``cgroup2``: a cgroup v2 hierarchy (the unified layout of modern testbed images):
  ``cpu.stat``'s ``usage_usec`` (exact) and ``user_usec``/``system_usec`` (the tick's
  split, scaled by the kernel to add up to the usage), which every v2 group has
  whether or not the ``cpu`` controller is enabled for it.

The split is a sample: over a load of a few milliseconds both parts can be zero
while the usage is not; over many loads it is an unbiased estimate.

Where a host has both (the hybrid layout mounts an empty v2 tree beside the v1
ones), ``cgroup1``: there the v2 tree is systemd's own bookkeeping, while the v1
cpuacct hierarchy is the one this kernel accounts CPU in for every tool (pidstat,
systemd-cgtop). A host with neither is named by the controller, before anything
starts. The same layout is used on every host: ``<mount>/quicbed/<testbed>/<group>``.

This module runs on a role's host (``python3 -m quicbed.roles.cgroups detect|remove
TESTBED``), like every module a node runs: standard library only. The controller
imports its pure functions (paths, parsing) so that both sides agree on them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

#: the folder under every hierarchy's mount that holds quicbed's groups
TOP = "quicbed"
MECHANISMS = ("cgroup1", "cgroup2")
#: the counter files of a group, per kind: user and system time
COUNTERS = {
    "cgroup1": ("cpuacct.usage", "cpuacct.usage_user", "cpuacct.usage_sys"),
    "cgroup2": ("cpu.stat",),
}
#: what one unit of each kind's counters is, in nanoseconds
UNIT_NS = {"cgroup1": 1, "cgroup2": 1000}
MOUNTS = Path("/proc/self/mounts")


def mounts(text: str | None = None) -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, options) of every cgroup mount on this host."""
    if text is None:
        try:
            text = MOUNTS.read_text()
        except OSError:
            return []
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] in ("cgroup", "cgroup2"):
            # a mount point's spaces are written \040 in /proc/mounts
            out.append((f[1].replace("\\040", " "), f[2], set(f[3].split(","))))
    return out


def detect(prefer: str | None = None, mounts_text: str | None = None) -> dict[str, Any]:
    """This host's accounting kind and its mount, or why it has none.

    ``prefer`` takes the named kind where the host has it (the tests measure the
    cgroup2 path on a hybrid host with it); None: cgroup1, else cgroup2.
    """
    found: dict[str, str] = {}
    for point, fstype, opts in mounts(mounts_text):
        kind = "cgroup2" if fstype == "cgroup2" else "cgroup1" if "cpuacct" in opts else None
        if kind is None or kind in found:
            continue
        # a v2 root may lack cpu.stat (kernels before 5.13): the groups have it
        if kind == "cgroup2" or all((Path(point) / n).exists() for n in COUNTERS[kind]):
            found[kind] = point
    if prefer is not None and prefer not in MECHANISMS:
        return {"mechanism": None, "why": f"unknown accounting kind {prefer!r}"}
    order = [prefer] if prefer else ["cgroup1", "cgroup2"]
    for kind in order:
        if kind in found:
            point = found[kind]
            if not os.access(point, os.W_OK):
                return {
                    "mechanism": None,
                    "why": f"{kind} is mounted at {point} but not writable (quicbed runs "
                    "its roles as root)",
                }
            return {"mechanism": kind, "mount": point}
    if prefer:
        return {"mechanism": None, "why": f"no {prefer} hierarchy is mounted"}
    return {
        "mechanism": None,
        "why": "neither a cgroup v1 hierarchy with cpuacct nor a cgroup v2 hierarchy is "
        "mounted (see /proc/mounts)",
    }


def detect_cpuset(mounts_text: str | None = None) -> dict[str, Any]:
    """Where this host can pin a group to CPUs (role placement), and its CPUs: a cgroup
    v1 ``cpuset`` hierarchy, or a cgroup v2 one that offers the ``cpuset`` controller;
    else why not."""
    for point, fstype, opts in mounts(mounts_text):
        p = Path(point)
        if fstype == "cgroup" and "cpuset" in opts:
            return {"kind": "cgroup1", "mount": point, "cpus": _read(p / "cpuset.cpus")}
        if fstype == "cgroup2" and "cpuset" in _read(p / "cgroup.controllers").split():
            return {"kind": "cgroup2", "mount": point, "cpus": _read(p / "cpuset.cpus.effective")}
    return {"kind": None, "why": "no cgroup hierarchy with the cpuset controller is mounted"}


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def cpu_list(text: str) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5} (the kernel's CPU list format); ValueError if not one."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise ValueError(f"{text!r} is not a CPU list (e.g. 0, 1-3, 0,2)")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def place(testbed: str, group: str, cpus: str, mounts_text: str | None = None) -> dict[str, Any]:
    """Pin ``group`` of ``testbed`` to ``cpus`` (``all``: every CPU of the host), made
    as needed: v1 gives each new level its parent's CPUs and memory nodes (it copies
    nothing by itself), v2 needs the controller enabled on every ancestor. Returns the
    group's ``cgroup.procs``, or the error naming the value."""
    cs = detect_cpuset(mounts_text)
    if cs["kind"] is None:
        return {"error": cs["why"]}
    have = cpu_list(cs["cpus"])
    want = have if cpus == "all" else cpu_list(cpus)
    if not want <= have:
        return {"error": f"CPUs {cpus} are not all among this host's {cs['cpus']}"}
    mount = Path(cs["mount"])
    chain = [mount / TOP, mount / TOP / testbed, mount / TOP / testbed / group]
    parent = mount
    for d in chain:
        if cs["kind"] == "cgroup2":
            ctl = parent / "cgroup.subtree_control"
            if "cpuset" not in _read(ctl).split():
                ctl.write_text("+cpuset")
        d.mkdir(exist_ok=True)
        if cs["kind"] == "cgroup1":
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not _read(d / name):
                    (d / name).write_text(_read(parent / name))
        parent = d
    (chain[-1] / "cpuset.cpus").write_text(cs["cpus"] if cpus == "all" else cpus)
    return {"procs": str(chain[-1] / "cgroup.procs"), "cpus": _read(chain[-1] / "cpuset.cpus")}


def group_dir(mount: str, testbed: str, group: str) -> str:
    """Where ``group`` of ``testbed`` lives under the hierarchy mounted at ``mount``."""
    return f"{mount}/{TOP}/{testbed}/{group}"


def procs_file(mount: str, testbed: str, group: str) -> str:
    """The file a process writes its PID to, to join the group (its children follow)."""
    return f"{group_dir(mount, testbed, group)}/cgroup.procs"


def counter_files(kind: str, mount: str, testbed: str, group: str) -> list[str]:
    return [f"{group_dir(mount, testbed, group)}/{name}" for name in COUNTERS[kind]]


def parse_counters(kind: str, texts: dict[str, str]) -> tuple[int, int, int]:
    """(total, user, system) in ns from a group's counter files' contents, by file name."""
    if kind == "cgroup1":
        return (
            int(texts["cpuacct.usage"].strip()),
            int(texts["cpuacct.usage_user"].strip()),
            int(texts["cpuacct.usage_sys"].strip()),
        )
    stat = dict(
        line.split(None, 1) for line in texts["cpu.stat"].splitlines() if len(line.split()) == 2
    )
    unit = UNIT_NS[kind]
    return (
        int(stat["usage_usec"]) * unit,
        int(stat["user_usec"]) * unit,
        int(stat["system_usec"]) * unit,
    )


def _pids(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has ended: its parent reaps it, not us)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _stop(pids: list[int], timeout: float = 3.0) -> None:
    """SIGTERM, then SIGKILL what is left: each process by its PID."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        if not any(_alive(p) for p in pids):
            return


def remove(testbed: str, mounts_text: str | None = None) -> list[str]:
    """Remove every group of ``testbed`` from every hierarchy, and what still runs in
    them (a killed run's processes: they joined these groups through quicbed alone).
    Returns what it removed, for the teardown's message."""
    removed: list[str] = []
    for point, _, _ in mounts(mounts_text):
        top = Path(point) / TOP / testbed
        if not top.is_dir():
            continue
        groups = sorted(d for d in top.iterdir() if d.is_dir())
        for group in groups:
            pids = _pids(group)
            if pids:
                _stop(pids)
                removed += [f"pid {p} in cgroup {group}" for p in pids]
            deadline = time.monotonic() + 5
            while True:
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a dying process still counts as a member for a moment
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        top.rmdir()
        removed.append(f"cgroups {top} ({', '.join(g.name for g in groups) or 'none'})")
        with contextlib.suppress(OSError):  # the shared top, once no testbed has groups there
            top.parent.rmdir()
    return removed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m quicbed.roles.cgroups")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("detect", help="print this host's accounting and cpuset as JSON")
    d.add_argument("--prefer", choices=MECHANISMS)
    r = sub.add_parser("remove", help="remove a testbed's groups and what runs in them")
    r.add_argument("testbed")
    p = sub.add_parser("place", help="pin a testbed's group to CPUs (made as needed)")
    p.add_argument("testbed")
    p.add_argument("group")
    p.add_argument("cpus", help="a CPU list (0, 1-3, 0,2) or all")
    args = ap.parse_args(argv)
    try:
        out: Any
        if args.cmd == "detect":
            out = detect(args.prefer) | {"cpuset": detect_cpuset()}
        elif args.cmd == "place":
            out = place(args.testbed, args.group, args.cpus)
        else:
            out = remove(args.testbed)
    except (OSError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
