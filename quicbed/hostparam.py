"""Host-wide kernel parameters a cell changes, such as TCP CUBIC's beta.

``/sys/module/tcp_cubic/parameters/beta`` holds for every TCP connection of a host,
whatever its namespace: two local testbeds share it. So a change is shared state on
the host: taken under a lock, recorded (the original value, the value set, the
testbeds holding it) in ``/run/quicbed``, refused when another testbed holds a
different value, and restored when the last holder lets go. Runs on the node that
owns the parameter (``python -m quicbed.hostparam``), so the same code serves the
local testbed and testbed nodes over ssh.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from quicbed.errors import QuicbedError

STATE_DIR = "/run/quicbed"
TCP_CUBIC_BETA = "/sys/module/tcp_cubic/parameters/beta"
#: Linux's CUBIC beta is in 1/1024 (717 = 0.7002)
BETA_SCALE = 1024


def beta_to_kernel(beta: float) -> str:
    return str(round(beta * BETA_SCALE))


def beta_from_kernel(value: str) -> float:
    return int(value) / BETA_SCALE


def _state_file(path: str) -> str:
    return os.path.join(STATE_DIR, path.strip("/").replace("/", "_") + ".json")


def _run(action: str, path: str, value: str, holder: str) -> dict[str, Any]:
    """acquire / release / read, under the parameter's lock; what the host has after."""
    os.makedirs(STATE_DIR, exist_ok=True)
    sf = _state_file(path)
    with open(sf + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(sf) as f:
                st: dict[str, Any] | None = json.load(f)
        except FileNotFoundError:
            st = None
        with open(path) as f:
            current = f.read().strip()
        if action == "acquire":
            others = [h for h in (st or {}).get("holders", []) if h != holder]
            if st and others and st["value"] != value:
                return {"refused": others, "value": st["value"], "current": current}
            st = st or {"original": current, "holders": []}
            st["value"] = value
            if holder not in st["holders"]:
                st["holders"].append(holder)
            with open(path, "w") as f:
                f.write(value)
        elif action == "release" and st is not None:
            st["holders"] = [h for h in st["holders"] if h != holder]
            if not st["holders"]:
                with open(path, "w") as f:
                    f.write(st["original"])
                os.unlink(sf)
                with open(path) as f:
                    return {"restored": st["original"], "current": f.read().strip()}
        if st is not None and action != "read":
            with open(sf, "w") as f:
                json.dump(st, f)
        with open(path) as f:
            return {"state": st, "current": f.read().strip()}


def answer(argv: list[str]) -> dict[str, Any]:
    """``action path value holder`` -> what the host has after (``error`` if refused by
    the host itself, e.g. no root)."""
    action, path = argv[0], argv[1]
    try:
        if action == "check":  # may this user change it? (nothing changed)
            if not os.path.exists(path):
                raise FileNotFoundError(2, "no such parameter on this host", path)
            if not os.access(path, os.W_OK):
                raise PermissionError(13, "Permission denied", path)
            return {"ok": True}
        return _run(*argv)
    except OSError as exc:
        return {"error": f"{exc.strerror or exc} ({exc.filename or path})"}


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] not in ("acquire", "release", "read", "check"):
        print(
            "usage: python -m quicbed.hostparam acquire|release|read|check PATH VALUE HOLDER",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(answer(argv)))
    return 0


def call(
    tb: Any, action: str, path: str, value: str, holder: str, role: str = "server"
) -> dict[str, Any]:
    """Run ``action`` on the host of ``role`` of ``tb`` (the local testbed's roles share
    this host: in this process); errors name the parameter and node."""
    if tb.controller_is_host:
        out = answer([action, path, value, holder])
    else:
        cp = tb.exec(
            role,
            [*tb.python("server"), "-m", "quicbed.hostparam", action, path, value, holder],
            check=False,
        )
        try:
            out = json.loads(cp.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise QuicbedError(
                f"{path} on the {role} of testbed {tb.describe_short()}: "
                f"{(cp.stderr or cp.stdout).strip()[-300:] or 'no answer'}"
            ) from None
    if "error" in out:
        raise QuicbedError(
            f"cannot set {path} on the {role} of testbed "
            f"{tb.describe_short()}: {out['error']} (it needs root there)"
        )
    return out


@contextmanager
def tcp_cubic_beta(tb: Any, beta: float, holder: str) -> Iterator[dict[str, Any]]:
    """TCP CUBIC's beta set to ``beta`` on the server's host for the block; restored
    after when no other testbed holds it. Refused, naming the holder, when another
    testbed runs with a different value."""
    value = beta_to_kernel(beta)
    got = call(tb, "acquire", TCP_CUBIC_BETA, value, holder)
    if "refused" in got:
        raise QuicbedError(
            f"TCP CUBIC beta {beta:g} ({value}/1024) is wanted, but testbed(s) "
            f"{', '.join(got['refused'])} on this host run with {got['value']}/1024: the "
            "parameter is host-wide; wait for them, or `quicbed testbed down` a dead one"
        )
    try:
        yield got
    finally:
        call(tb, "release", TCP_CUBIC_BETA, value, holder)


@contextmanager
def at_least(tb: Any, path: str, value: int, role: str = "server") -> Iterator[None]:
    """An integer parameter (``net.core.rmem_max``) at least ``value`` on ``role``'s host
    for the block: one already that high is left alone (or, where another testbed raised
    it, held at its value too, so it is not restored while this block runs); else set to
    ``value`` under the lock, as :func:`tcp_cubic_beta` sets beta, and restored when the
    last holder lets go.
    Refused, naming the holder, when another testbed holds it at another value."""
    holder = holder_of(tb)
    now = call(tb, "read", path, "", holder, role=role)
    held = now.get("state")
    if held and int(held["value"]) >= value:
        value = int(held["value"])  # raised by another testbed: hold it there with it
    elif int(now["current"]) >= value:
        yield
        return
    got = call(tb, "acquire", path, str(value), holder, role=role)
    if "refused" in got:
        raise QuicbedError(
            f"{path} {value} is wanted on the {role}, but testbed(s) "
            f"{', '.join(got['refused'])} on that host hold it at {got['value']}: the "
            "parameter is host-wide; wait for them, or `quicbed testbed down` a dead one"
        )
    try:
        yield
    finally:
        call(tb, "release", path, str(value), holder, role=role)


#: the host-wide parameters a cell may hold, which a testbed's clean-up lets go of
HELD = (TCP_CUBIC_BETA, "/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max")


def holder_of(tb: Any) -> str:
    return f"{tb.kind}:{tb.describe_short()}"


def release_all(tb: Any) -> None:
    """A killed owner's hold on host-wide parameters, let go (a testbed's clean-up)."""
    for path in HELD:
        if tb.controller_is_host and os.path.exists(_state_file(path)):
            call(tb, "release", path, "", holder_of(tb))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
