"""How long `make demo` takes on a new machine, set-up and sweep apart (issue 46, item 4).

Run as root, with nothing else running on the machine:

    .venv/bin/python benchmarks/first_demo.py [--warm] [--json FILE]

In a fresh Debian 12 minbase root (tools/freshroot.py, as the fresh-machine test makes
it), as a new user would: the README's prerequisites line, a clone of this checkout's
committed HEAD, then `make demo`, every output line stamped with the time it appeared.
The set-up ends at the playbook's recap line; the rest is the demo sweep and its report.
Without ``--warm`` the root has none of the download and build caches the fresh-machine
test keeps (CACHE/warm): Go, the Go modules, apt's packages, pip's wheels and npm's
packages all come from the registries, as on a new machine. The root's Debian base is
the cached tarball (its unpacking is not part of the user's time: a new machine has its
Debian already).

Prints the step times, every demo cell's status and valid loads, and the host's steal
and busy shares over the run (/proc/stat), with the date and machine. The target
(issue 46): at most 5 minutes from `make demo` to the report, on a quiet host.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed.link import hostcpu

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # freshroot: a development tool, not in the package
from freshroot import CHROOT_REPO, ORIGIN, FreshMachine, fresh_machine  # noqa: E402

#: the README's prerequisites line is the one apt-get line in its code blocks
README = ROOT / "README.md"
#: make demo's testbed prefix (the CLI's default), so the teardown finds it
PREFIX = "qb"
#: the line that ends the set-up: the playbook's recap of the host
RECAP = re.compile(r"^localhost\s+:\s+ok=\d+\s+changed=\d+")
#: what the stamped command prints last: make demo's exit status
RC = re.compile(r"^quicbed-first-demo-rc=(\d+)$")
TIMEOUTS = {"prerequisites": 600, "clone": 120, "make demo": 1800}


def prerequisites() -> str:
    """The README's prerequisites line, as written there."""
    blocks = re.findall(r"^```\n(.*?)^```", README.read_text(), re.S | re.M)
    lines = [ln for b in blocks for ln in b.splitlines() if ln.startswith("apt-get ")]
    if len(lines) != 1:
        raise SystemExit(f"README.md must have one apt-get prerequisites line: {lines}")
    return lines[0]


def stamped(m: FreshMachine, step: str, command: str) -> tuple[int, list[tuple[float, str]]]:
    """``command`` in the root with each output line stamped (epoch seconds, in the
    root, as the line appears); its exit status and the stamped lines."""
    wrapped = (
        f'{{ {command}; echo "quicbed-first-demo-rc=$?"; }} 2>&1 | '
        'while IFS= read -r l; do printf "%s %s\\n" "$(date +%s.%N)" "$l"; done'
    )
    cp = m.sh(step, wrapped, cwd=CHROOT_REPO)
    lines = []
    for raw in cp.stdout.splitlines():
        stamp, _, text = raw.partition(" ")
        try:
            lines.append((float(stamp), text))
        except ValueError:
            lines.append((lines[-1][0] if lines else 0.0, raw))
    rc = next((int(x.group(1)) for _, t in lines if (x := RC.match(t))), cp.returncode or -1)
    return rc, lines


def demo_cells(m: FreshMachine) -> list[dict[str, Any]]:
    """Every demo cell's last attempt: its status and its valid measured loads."""
    db = m.root / CHROOT_REPO.lstrip("/") / "results/demo/store.sqlite"
    if not db.exists():
        return []
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT a.cell_id, a.status, c.config, "
            " (SELECT COUNT(*) FROM runs r WHERE r.cell_id = a.cell_id AND r.attempt = a.attempt"
            "  AND r.valid = 1 AND r.warmup = 0) "
            "FROM attempts a JOIN cells c USING (cell_id) "
            "WHERE a.attempt = (SELECT MAX(attempt) FROM attempts b WHERE b.cell_id = a.cell_id)"
        ).fetchall()
    out = []
    for cell_id, status, config, valid in rows:
        cfg = json.loads(config)
        link = cfg.get("condition") or {}
        out.append(
            {
                "cell": cell_id,
                "page": cfg.get("page"),
                "rate_mbit": link.get("rate_mbit"),
                "status": status,
                "valid_loads": valid,
            }
        )
    return sorted(out, key=lambda r: (str(r["rate_mbit"]), str(r["page"])))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", action="store_true", help="keep the root's download caches")
    ap.add_argument("--json", type=Path, help="also write every figure here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("run as root: the fresh root needs chroot and mount namespaces")
    cpu0 = hostcpu.sample_here()
    started = datetime.now(UTC)
    with fresh_machine(PREFIX, warm=a.warm, timeouts=TIMEOUTS) as m:
        cp = m.sh("prerequisites", prerequisites())
        if cp.returncode != 0:
            raise SystemExit("the README's prerequisites failed:\n" + cp.stdout[-3000:])
        cp = m.sh("clone", f"git clone -q file://{ORIGIN} {CHROOT_REPO}")
        if cp.returncode != 0:
            raise SystemExit("the clone failed:\n" + cp.stdout[-3000:])
        head = m.sh("clone", "git rev-parse --short HEAD", cwd=CHROOT_REPO).stdout.strip()
        rc, lines = stamped(m, "make demo", "make demo")
        cells = demo_cells(m)
    cpu = hostcpu.shares(cpu0, hostcpu.sample_here())
    if not lines:
        raise SystemExit("make demo printed nothing:\n" + "\n".join(m.log)[-3000:])
    t0, t_end = lines[0][0], lines[-1][0]
    recap = next((t for t, text in lines if RECAP.match(text)), None)
    if recap is None:
        print("\n".join(text for _, text in lines[-60:]))
        raise SystemExit(f"make demo (rc {rc}) never finished its set-up (no recap line)")
    figures = {
        "date": f"{started:%Y-%m-%d %H:%M} UTC",
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, kernel {platform.release()}",
        "commit": head,
        "caches": "warm (the fresh-machine test's)" if a.warm else "cold (a new machine)",
        "make_demo_rc": rc,
        "prerequisites_s": round(m.times.get("prerequisites", 0.0), 1),
        "setup_s": round(recap - t0, 1),
        "sweep_and_report_s": round(t_end - recap, 1),
        "make_demo_s": round(t_end - t0, 1),
        "cells": cells,
        "host_cpu": cpu,
    }
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")
    steal = f"steal {cpu['steal_pct']:.1f} %, busy {cpu['busy_pct']:.1f} %" if cpu else "-"
    print(
        f"\nmake demo on a fresh Debian 12 root, caches {figures['caches']}; "
        f"{figures['date']}, {figures['machine']}, commit {head}; host {steal} over the run\n"
    )
    print("| step | seconds |")
    print("|---|---:|")
    print(f"| README prerequisites (apt-get) | {figures['prerequisites_s']:.0f} |")
    print(f"| make demo: set-up (venv, playbook) | {figures['setup_s']:.0f} |")
    print(f"| make demo: demo sweep and report | {figures['sweep_and_report_s']:.0f} |")
    print(f"| **make demo, in all** (exit {rc}) | **{figures['make_demo_s']:.0f}** |")
    print("\n| rate | page | status | valid loads |")
    print("|---:|---|---|---:|")
    for c in cells:
        print(f"| {c['rate_mbit']} | {c['page']} | {c['status']} | {c['valid_loads']} |")
    done = sum(c["status"] == "done" for c in cells)
    print(f"\n{done} of {len(cells)} demo cells done; target: make demo within 300 s")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
