"""A cell's CPU profile: perf attached to each arm's server and client, folded, drawn.

Each arm's processes are found by their control groups (quicbed.roles.cpuaccounting): every
process of the arm's server group and of its client group when the measured loads or
a flow begin. ``perf record -e cpu-clock -g -p PIDS`` runs on the role's host, and
follows what those processes fork later (perf's inherit: Chromium's renderers, a
server's new workers). When they end, ``perf script`` resolves the stacks on that host
(where the binaries are), and inferno folds them on the controller: per arm and role
one folded file (``profiles/CELL/ATTEMPT/ARM.ROLE.folded``), and per arm one flame
graph of both roles (``ARM.svg``, a root frame per role). The component shares are
computed from the folded files when read (quicbed.profile.components), never stored.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.paths import REPO_ROOT
from quicbed.profile import EVENT, FREQUENCY_HZ
from quicbed.roles.cpuaccounting import group_name
from quicbed.testbed.lifecycle import Process, RPath, Testbed

#: = roles/inferno/defaults/main.yml inferno_version (tests/test_profile_cpu.py checks)
INFERNO_VERSION = "0.12.3"
ROLES = ("server", "client")


def inferno(name: str) -> Path:
    """One of inferno's programs, as roles/inferno installs it on the controller."""
    return REPO_ROOT / "build" / "tools" / f"inferno-{INFERNO_VERSION}" / "bin" / name


def unavailable(tb: Testbed) -> str | None:
    """Why ``--profile cpu`` cannot run on ``tb`` (one line naming what), or None."""
    for name in ("inferno-collapse-perf", "inferno-flamegraph"):
        if not inferno(name).is_file():
            return f"{inferno(name)} is missing on this machine (install it: make setup-profile)"
    for role in ROLES:
        tmp = RPath(f"/tmp/quicbed-perf-probe-{os.getpid()}-{role}.data")
        cp = tb.on_host(role, ["perf", "record", "-q", "-e", EVENT, "-o", str(tmp), "--", "true"])
        tb.on_host(role, ["rm", "-f", str(tmp)])
        if cp.returncode != 0:
            why = (cp.stderr.strip().splitlines() or [f"exit {cp.returncode}"])[0]
            if cp.returncode == 127 or "not found" in why:
                why = "perf is not installed (roles/tools: linux-perf)"
            return f"perf cannot record {EVENT} on {tb.name(role)}: {why}"
    return None


@dataclass
class _Recording:
    arm: str
    role: str
    process: Process
    data: RPath


@dataclass
class CpuProfile:
    """Profiles of a cell's arms: attach, stop, fold; then files and flame graphs."""

    tb: Testbed
    root: Path  # the results folder
    cell_id: str
    attempt: int
    #: the program the arms' clients are (its map classifies their stacks): quicbed-bulk,
    #: chromium
    client: str
    #: per arm, a client program other than ``client`` (a page cell's arm loaded in
    #: Firefox); recorded so the report classifies each arm's client by its own map
    clients: dict[str, str] = field(default_factory=dict)
    folded: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _n: int = 0

    @property
    def folder(self) -> str:
        """Where the files go, relative to the results folder."""
        return f"profiles/{self.cell_id}/{self.attempt}"

    def attach(self, arm: str, also: dict[str, list[int]] | None = None) -> list[_Recording]:
        """perf on ``arm``'s server and client processes, from now on; ``also``: per role,
        processes just spawned into the groups (a spawn returns before its process has
        joined its group)."""
        recs = []
        for role in ROLES:
            group = group_name(role, arm)
            pids = sorted(set(self.tb.cpu.pids(role, group)) | set((also or {}).get(role, [])))
            if not pids:
                self.notes.append(f"{arm} {role}: no process in group {group} to profile")
                continue
            self._n += 1
            data = self.tb.workdir(role) / "profile" / f"{self._n}-{arm}-{role}.data"
            self.tb.mkdir(role, data.parent)
            argv = ["perf", "record", "-q", "-e", EVENT, "-F", str(FREQUENCY_HZ), "-g"]
            argv += ["-p", ",".join(str(p) for p in pids), "-o", str(data)]
            proc = self.tb.spawn(role, argv, log=data.with_suffix(".log"))
            recs.append(_Recording(arm, role, proc, data))
        for r in recs:  # perf makes its file once it is attached
            deadline = time.monotonic() + 10
            while not self.tb.has_file(r.role, r.data):
                if r.process.poll() is not None or time.monotonic() > deadline:
                    raise QuicbedError(
                        f"perf did not start on {self.tb.name(r.role)}: "
                        f"{self.tb.read_text(r.role, r.data.with_suffix('.log')).strip()}"
                    )
                time.sleep(0.02)
        return recs

    def halt(self, recs: list[_Recording]) -> None:
        """End the recordings (perf writes its file on SIGINT) as soon as the measured
        work ends; their folding (:meth:`fold`) may wait until the flow's facts are in."""
        for r in recs:
            if r.process.poll() is None:
                self.tb.kill(r.role, r.process.pid, "INT")
        for r in recs:
            with contextlib.suppress(QuicbedError):
                r.process.wait(30)
            r.process.stop()

    def fold(self, recs: list[_Recording]) -> None:
        """Each halted recording's stacks, resolved on its host, folded here."""
        for r in recs:
            cp = self.tb.exec(
                r.role, ["perf", "script", "-i", str(r.data)], timeout=600, check=False
            )
            self.tb.remove(r.role, r.data)
            self.tb.remove(r.role, r.data.with_suffix(".log"))
            if cp.returncode != 0:
                self.notes.append(
                    f"{r.arm} {r.role}: perf script failed: {cp.stderr.strip()[:200]}"
                )
                continue
            folded = subprocess.run(
                [str(inferno("inferno-collapse-perf"))],
                input=cp.stdout,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            mine = self.folded.setdefault((r.arm, r.role), {})
            for line in folded.stdout.splitlines():
                stack, _, count = line.rpartition(" ")
                if stack and count.isdigit():
                    mine[stack] = mine.get(stack, 0) + int(count)

    def finish(self, stacks: dict[str, str]) -> dict[str, Any]:
        """Write each arm's folded files and its flame graph; the record for the
        attempt's provenance (what was sampled how, where the files are)."""
        out = self.root / self.folder
        out.mkdir(parents=True, exist_ok=True)
        files: dict[str, dict[str, str]] = {}
        for arm in sorted({a for a, _ in self.folded}):
            both = []
            mine: dict[str, str] = {}
            if not any(self.folded.get((arm, role)) for role in ROLES):
                self.notes.append(f"{arm}: no samples (its loads or flows ended before perf ran)")
            for role in ROLES:
                got = self.folded.get((arm, role)) or {}
                f = out / f"{arm}.{role}.folded"
                f.write_text("".join(f"{s} {n}\n" for s, n in sorted(got.items())))
                mine[role] = f.name
                both += [f"{role};{s} {n}" for s, n in sorted(got.items())]
            svg = out / f"{arm}.svg"
            title = f"{arm} ({stacks.get(arm, '?')}): server and client, perf {EVENT}"
            cp = subprocess.run(
                [str(inferno("inferno-flamegraph")), "--title", title, "--hash"],
                input="\n".join(both) + "\n",
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if not any(self.folded.get((arm, role)) for role in ROLES):
                files[arm] = mine
                continue
            if cp.returncode == 0:
                svg.write_text(cp.stdout)
                mine["svg"] = svg.name
            else:
                self.notes.append(f"{arm}: inferno-flamegraph failed: {cp.stderr.strip()[:200]}")
            files[arm] = mine
        return {
            "kind": "cpu",
            "event": EVENT,
            "frequency_hz": FREQUENCY_HZ,
            "call_graph": "fp",
            "tools": {"inferno": INFERNO_VERSION, "perf": self._perf_version()},
            "stacks": stacks,
            "client": self.client,
            "clients": {a: c for a, c in self.clients.items() if c != self.client},
            "folder": self.folder,
            "files": files,
            "notes": self.notes,
        }

    def _perf_version(self) -> str:
        cp = self.tb.on_host("server", ["perf", "--version"])
        return cp.stdout.strip()
