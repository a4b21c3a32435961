"""Running external programs: every call has a timeout and every child a PID we own.

The project never uses a global ``pkill``: a process is stopped by the PID we
started it with. Children of a short-lived command get PR_SET_PDEATHSIG so that
a crash of quicbed (even ``kill -9``) does not leave an emulator or iperf3 behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from quicbed.errors import QuicbedError

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def run(
    argv: Sequence[str],
    *,
    timeout: float = 30.0,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, text mode, with a hard timeout.

    A non-zero exit with ``check`` raises QuicbedError carrying the command and the
    tail of its stderr, because the caller's user needs to see what failed.
    """
    try:
        cp = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            check=False,
        )
    except FileNotFoundError as exc:
        raise QuicbedError(f"program not found: {argv[0]} (run `make setup`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise QuicbedError(f"timed out after {timeout:g} s: {' '.join(argv)}") from exc
    if check and cp.returncode != 0:
        tail = (cp.stderr or cp.stdout or "").strip().splitlines()[-3:]
        raise QuicbedError(
            f"command failed (exit {cp.returncode}): {' '.join(argv)}: {' | '.join(tail)}"
        )
    return cp


def run_bytes(
    argv: Sequence[str], *, timeout: float = 60.0, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``run`` for binary data (file contents over ssh): unchecked, the caller judges."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, timeout=timeout, input=input, check=False
        )
    except FileNotFoundError as exc:
        raise QuicbedError(f"program not found: {argv[0]} (run `make setup`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise QuicbedError(f"timed out after {timeout:g} s: {' '.join(argv)}") from exc


def spawn(
    argv: Sequence[str],
    *,
    stdout: Path | None = None,
    stderr: Path | None = None,
    die_with_parent: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a long-lived process whose output goes to files, not pipes.

    Files rather than pipes: a full pipe would stall a daemon that nobody reads.
    """
    out = open(stdout, "ab") if stdout else subprocess.DEVNULL  # noqa: SIM115
    err = open(stderr, "ab") if stderr else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if die_with_parent else None,
            env=env,
        )
    except FileNotFoundError as exc:
        raise QuicbedError(f"program not found: {argv[0]} (run `make setup`)") from exc
    finally:
        for f in (out, err):
            if hasattr(f, "close"):
                f.close()


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def stop_pid(pid: int, *, timeout: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """Stop one process by PID: ``sig``, wait, then SIGKILL. Reaps it if it is our child."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            _reap(pid, block=True)  # a dying thread group is a zombie before it can be reaped
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):
        _reap(pid)
        if not pid_alive(pid):
            _reap(pid, block=True)
            return
        time.sleep(0.02)


def _reap(pid: int, block: bool = False) -> None:
    """Collect our child's exit status; a no-op for a process that is not our child.

    ``block`` only after the process is known to be dead: a multi-threaded process
    shows as a zombie while its other threads still exit, and only then is reapable.
    """
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0 if block else os.WNOHANG)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (for emulator CPU figures)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
