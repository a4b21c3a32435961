"""The README's path on a machine that has nothing: a fresh Debian 12 minbase root.

CI runs on a machine that earlier sessions have already set up, so a missing install
step cannot show there. This test bootstraps a minimal Debian 12 (debootstrap
`minbase`, cached as a tarball in /var/cache/quicbed/fresh-machine), gives it only what
makes the registries reachable from this machine (the CA trust store, apt's sources and
config, pip/npm config and the registry and CA variables of the environment, DNS), then
inside it, with chroot:

1. runs the README's prerequisites line exactly as written there,
2. clones this repository's committed HEAD,
3. runs the README's set-up command (`make setup`), twice: the second must change
   nothing (`changed=0`, Go binaries byte for byte the same),
4. measures one small cell (5 KB, 10 Mbit/s, 3 runs per arm; its receipt's TCP probes
   1 s each way) on the local testbed,
5. asks for a cell with a component the base lacks (the gQUIC arm's browser): refused
   naming `make setup-chromium72`; runs that command; measures that cell.

The root, its mount namespace and its teardown are tools/freshroot.py's (the first-demo
benchmark uses the same); the test fails when the teardown had to force anything or
left a mount, process, network namespace or link behind. The root's download and build
caches are kept between runs here (benchmarks/first_demo.py times a cold one).

3 minutes here alone, nearly 4 in make test's parallel lane: debootstrap 30 s the first
time on a machine (then the cached tarball, 3 s to unpack), prerequisites 10 s, the
first set-up (the base) 78 s with the root's caches warm (120 s before the venv dropped
the full ansible package and byte-compiling, and Debian's npm gave way to the
registry's), the second 15 s, the cell 20 s, the component and its cell 40 s. The step
times of the last run are printed (pytest -s) and kept in
/var/cache/quicbed/fresh-machine/last-run.txt.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lanes import alone

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "tools"))  # freshroot: a development tool, not in the package
from freshroot import (  # noqa: E402
    CACHE,
    CHROOT_REPO,
    ORIGIN,
    FreshMachine,
    base_tarball,
    debian_mirror,
    fresh_machine,
    kernel_cannot,
    mounts_under,
    pids_rooted_in,
)

STEP_TIMEOUT = {
    "prerequisites": 300,
    "clone": 120,
    "setup": 900,
    "setup again": 300,
    "cell": 300,
    "component": 600,
}


# --- what the README says ---------------------------------------------------------


def readme_commands() -> tuple[str, str]:
    """The prerequisites line and the set-up command, exactly as README.md states them."""
    text = README.read_text()
    blocks = re.findall(r"^```\n(.*?)^```", text, re.S | re.M)
    prereq = [ln for b in blocks for ln in b.splitlines() if ln.startswith("apt-get ")]
    assert len(prereq) == 1, f"README.md must have one apt-get prerequisites line: {prereq}"
    assert "`make demo` first runs `make setup`" in text, "README.md no longer names its set-up"
    return prereq[0], "make setup"


def test_readme_names_the_prerequisites_of_a_minimal_debian() -> None:
    prereq, _ = readme_commands()
    for pkg in ("make", "python3-venv", "git", "ca-certificates"):
        assert re.search(rf"\s{re.escape(pkg)}(\s|$)", prereq), (pkg, prereq)


@pytest.fixture
def machine(root: None) -> Iterator[FreshMachine]:
    why = kernel_cannot()
    if why:
        pytest.skip(why)
    m: FreshMachine | None = None
    try:
        with fresh_machine(timeouts=STEP_TIMEOUT) as m:
            yield m
    finally:
        if m is not None:
            times = ", ".join(f"{k} {v:.0f} s" for k, v in m.times.items())
            print("fresh machine:", times)
            (CACHE / "last-run.txt").write_text(f"{time.strftime('%F %T')}: {times}\n")


# --- the test ----------------------------------------------------------------------


def _changed_tasks(out: str) -> str:
    """The changed lines of an ansible-playbook output, each under its task."""
    shown, task = [], ""
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith("changed:"):
            shown.append(f"{task}: {line}")
    return "\n".join(shown)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parallel  # its minutes of installs share the cores; its cells run alone
def test_readme_path_on_a_fresh_debian(machine: FreshMachine) -> None:
    m = machine
    prereq, setup = readme_commands()
    log = lambda: "\n".join(m.log)  # noqa: E731

    # The mounts are the namespace's own: none of them is visible in this one.
    assert not mounts_under(m.dir), "the chroot's mounts leaked into this namespace"
    inside = mounts_under(m.root, f"/proc/{m.holder.pid}/mountinfo")  # type: ignore[union-attr]
    assert str(m.root) in inside and f"{m.root}/proc" in inside, inside

    # A minbase root has neither make nor a venv-capable Python.
    assert m.sh("prerequisites", "command -v make || command -v git").returncode != 0
    cp = m.sh("prerequisites", prereq)
    assert cp.returncode == 0, log()

    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    cp = m.sh(
        "clone",
        f"git clone -q file://{ORIGIN} {CHROOT_REPO} && git -C {CHROOT_REPO} rev-parse HEAD",
    )
    assert cp.returncode == 0 and head in cp.stdout, log()

    cp = m.sh("setup", setup, cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    assert re.search(
        r"localhost\s+:\s+ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", cp.stdout
    ), log()
    assert "quic_server_google_enabled is false" in cp.stdout, log()
    sums = m.sh("setup again", f"sha256sum {CHROOT_REPO}/build/bin/*").stdout
    built = {line.split("/")[-1] for line in sums.splitlines()}
    # the base: quicbed's Go servers, emulator and bulk client (quiche's server is a
    # component of its own, `make setup-quiche`)
    assert built == {
        "quicbed-linkem",
        "quicbed-h3server",
        "quicbed-bulk",
        "quicbed-gquic-server",
    }, sums
    # the same playbook again (also `make setup`'s idempotence on this machine: the
    # one check of it, on the cleanest machine there is): nothing changes, and the Go
    # binaries, rebuilt, are the same bytes
    cp = m.sh("setup again", setup, cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    recap = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", cp.stdout)
    assert recap, log()
    assert recap.group(1) == "0", "second set-up changed:\n" + _changed_tasks(cp.stdout)
    assert "Build the binaries into the scratch directory" in cp.stdout, log()  # rebuilt
    assert m.sh("setup again", f"sha256sum {CHROOT_REPO}/build/bin/*").stdout == sums
    cp = m.sh(
        "setup again",
        "command -v chromium iperf3 node && "
        f"test -d {CHROOT_REPO}/client/node_modules/chrome-har-capturer",
    )
    assert cp.returncode == 0, log()

    _cell_done(m, "cell", ("h2", "h3"), log)

    # a component beyond the base, installed when a cell asks for it: refused first,
    # naming the one command; after that command, the same cell runs. The gQUIC arm's
    # browser, Chromium 72 (Envoy's kernel probes cannot run in this chroot: the
    # namespace's mount view hides its binary's path from them; a real machine has none)
    gquic = ("h2", "gquic")
    cp = m.sh("component", _cell_command(m, gquic), cwd=CHROOT_REPO)
    assert cp.returncode == 2 and "install it: make setup-chromium72" in cp.stdout, log()
    cp = m.sh("component", "make setup-chromium72", cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    _cell_done(m, "component", gquic, log)


def _cell_command(m: FreshMachine, arms: tuple[str, ...]) -> str:
    """The cell, with the shortest receipt the product offers (1 s of TCP each way): every
    check of the receipt still runs, and while it runs the other tests wait (alone)."""
    return (
        f".venv/bin/quicbed cell --rate 10 --rtt 36 --page 5kb --runs 3 "
        f"--arms {','.join(arms)} --prefix {m.prefix} --out /root/r --json "
        "--receipt-tcp-seconds 1"
    )


def _cell_done(m: FreshMachine, step: str, arms: tuple[str, ...], log: Any) -> None:
    """One small cell of ``arms`` in the fresh root: done, each arm's 3 loads measured,
    while no other test runs (the test shares the cores until here: tests/lanes.py)."""
    with alone():
        cp = m.sh(step, _cell_command(m, arms), cwd=CHROOT_REPO)
    assert cp.returncode == 0, log()
    found = re.search(r"^\{$.*^\}$", cp.stdout, re.S | re.M)
    assert found, log()
    result = json.loads(found.group(0))
    assert result["status"] == "done", result
    for arm in arms:
        v = result["verified"][arm]
        # a load the busy machine spoiled is measured again (v["replacements"])
        assert v["measured"] - v["replacements"] == 3 and v["valid"] >= 2, (
            arm,
            v,
            result.get("invalid"),
        )


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parallel
def test_teardown_after_a_failure_leaves_nothing(root: None) -> None:
    """A step that fails with a process still running in the chroot and a network
    namespace of the testbed's prefix still mounted: the teardown kills the process,
    unmounts everything (the namespace's bind mount too), ends the holder, says what it
    had to force, and nothing of it is left."""
    why = kernel_cannot()
    if why:
        pytest.skip(why)
    m = FreshMachine(base_tarball(debian_mirror()), "f" + secrets.token_hex(3))
    stray = None
    try:
        m.configure()
        m.enter()
        with pytest.raises(AssertionError, match="a step failed"):
            netns = f"{m.root}/run/netns/{m.prefix}-client"
            cp = m.nsenter(["sh", "-c", f"touch {netns} && unshare --net={netns} true"], 30)
            assert cp.returncode == 0, cp.stdout
            stray = subprocess.Popen(
                [
                    "nsenter",
                    f"--target={m.holder.pid}",
                    "--mount",
                    "--",
                    "nsenter",  # type: ignore[union-attr]
                    f"--net={netns}",
                    "chroot",
                    str(m.root),
                    "/bin/sleep",
                    "600",
                ],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while not pids_rooted_in(m.root):
                assert time.monotonic() < deadline, "the stray process did not start"
                time.sleep(0.05)
            net = os.readlink(f"/proc/{pids_rooted_in(m.root)[0]}/ns/net")
            assert net != os.readlink("/proc/self/ns/net")
            assert netns in mounts_under(m.root, f"/proc/{m.holder.pid}/mountinfo")  # type: ignore[union-attr]
            raise AssertionError("a step failed")
    finally:
        forced = m.teardown()
        if stray is not None:
            stray.wait(timeout=30)
        ended = m.holder is not None and m.holder.poll() is not None
        left = (mounts_under(m.dir), pids_rooted_in(m.root), ended)
        m.remove()
    assert any("SIGTERM" in f and "/bin/sleep 600" in f for f in forced), forced
    assert left == ([], [], True), left
    in_net = []
    for d in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(d / "ns" / "net") == net:
                in_net.append(d.name)
    assert not in_net, f"processes still in the testbed's network namespace: {in_net}"
    assert not m.dir.exists() and not Path(f"{m.dir}.lock").exists()
