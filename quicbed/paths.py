"""Where quicbed finds its own built programs and data, and what a file's bytes hash to.

Also what identifies a program's build on the machine that runs it (program_build: the
SHA-256 of its file, and a Go program's module versions): a program rebuilt from
changed code keeps its version, so the version alone cannot tell two builds apart. The
stacks and browsers probe their own programs with it (quicbed.servers.webserver.WebServer
.software, quicbed.client.browser.Browser.software), provenance records every one
and the software check compares them (quicbed.results.provenance, quicbed.results.folder). It knows
no testbed, only ``run``, which asks the right machine.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from quicbed.errors import QuicbedError

REPO_ROOT = Path(__file__).resolve().parent.parent


def setup_command(component: str | None) -> str:
    """The one command that installs ``component`` on this machine (its names:
    playbooks/group_vars/all.yml; None: the base, which `make setup` installs)."""
    return f"make setup-{component}" if component else "make setup"


def bin_path(name: str) -> Path:
    """Path of one of the project's Go binaries (built by `make setup` into build/bin).

    QUICBED_BIN_DIR overrides the directory, e.g. on a testbed node.
    """
    bindir = Path(os.environ.get("QUICBED_BIN_DIR", REPO_ROOT / "build" / "bin"))
    path = bindir / name
    if not os.access(path, os.X_OK):
        raise QuicbedError(f"{name} is not built at {path} (run `make setup`)")
    return path


def check_folder_target(path: Path, option: str) -> None:
    """``path`` is a folder, or could be made one: an error naming ``option`` if a file
    stands at it or at one of its parents (``--out results.csv``, ``--out file/sub``)."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise QuicbedError(f"{option}: {p} is a file, not a folder")
            return


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks (packages, traces, archives)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- a program's build, where it runs ---------------------------------------------------
#: runs a command where a component lives (a testbed's role, or this machine); its
#: output, or None if it failed
Run = Callable[[list[str]], str | None]
#: the file dpkg rewrites whenever a package is installed, upgraded or removed: what a
#: probe of a packaged program's version reads beside the program
DPKG_STATUS = "/var/lib/dpkg/status"
#: where roles/quicbed_binaries installs Go (its GOROOT), for a ``go`` not on PATH
GO = "/usr/local/go/bin/go"


class Reads:
    """A Run that also keeps the files its caller said the answers come from (``reads``):
    what a kept software record is checked against (quicbed.results.software_cache)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.files: list[str] = []

    def __call__(self, argv: list[str]) -> str | None:
        return self.run(argv)


def reads(run: Run, *files: str) -> None:
    """Say, before asking ``run``, which files the answer comes from: paths, or a name
    looked up on PATH (a link is followed; a file that is not there counts as such).

    A software probe names every file that can change what it reports, or its record
    could be given again after a file changed (quicbed.results.software_cache keeps a
    record only while all of them are the same); a probe that names none is probed every
    time. A plain Run keeps nothing."""
    if isinstance(run, Reads):
        run.files.extend(f for f in files if f not in run.files)


def sha256_of(run: Run, paths: list[str]) -> dict[str, str] | None:
    """The SHA-256 of each file where ``run`` asks, by path (a link is followed); None if
    one is missing. One command for all of them: on an ssh testbed each is a round trip."""
    text = run(["sha256sum", *paths])
    out = {}
    for line in (text or "").splitlines():
        digest, _, name = line.partition(" ")
        out[name[1:]] = digest  # "<hex>  <path>", or "<hex> *<path>" read as binary
    return out if text and set(out) == set(paths) else None


def go_info(path: str, run: Run) -> dict[str, Any]:
    """The Go and module versions compiled into a Go program; {} for any other file (or
    where there is no ``go`` to read them with: the record then says no modules)."""
    reads(run, "go", GO)
    text = run(["go", "version", "-m", path]) or run([GO, "version", "-m", path])
    if not text:
        return {}
    first, *rest = text.splitlines()
    info: dict[str, Any] = {"go": first.rsplit(":", 1)[-1].strip(), "deps": {}}
    last = None
    for line in rest:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "dep":
            info["deps"][parts[1]] = parts[2]
            last = parts[1]
        elif len(parts) >= 2 and parts[0] == "=>" and last:
            # a replaced module (quic-go with go/patches): the patched copy is another
            # program than the release, so attempts built from each never pool
            info["deps"][last] += f" => {PurePosixPath(parts[1]).name}"
        elif len(parts) >= 2 and parts[0] == "build" and parts[1].startswith("vcs."):
            key, _, val = parts[1].partition("=")
            info[key.replace(".", "_")] = val
    return info


def program_build(run: Run, path: str) -> dict[str, Any] | None:
    """One program's build where ``run`` asks: its path, the SHA-256 of its file and, for
    a Go program, the Go and module versions compiled into it; None where it is not
    installed. The digest is what tells a rebuild: a program rebuilt from changed code
    keeps its version (our servers' is quicbed's), and only Go's say their modules.
    Our builds are reproducible (roles/quicbed_binaries: -trimpath, no VCS stamp; Cargo
    --locked), so the same code built again has the same digest."""
    reads(run, path)
    sums = sha256_of(run, [path])
    if sums is None:
        return None
    return {"path": path, **go_info(path, run), "sha256": sums[path]}
