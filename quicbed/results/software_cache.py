"""Software records kept between attempts while the files they come from stay the same.

Every attempt records the build of every component (quicbed.results.provenance.software):
the SHA-256 of each server program (Envoy's is over 100 MB), the version Chromium and
Firefox print (each starts to print it), Apache's modules. Asked afresh, that is over a
second of every cell, in every sweep and every test. Each probe names the files its
answer comes from (quicbed.paths.reads), and its record is kept on the controller with
each file's identity on the machine it was read on: the device, inode, size, and the
modification and change times to the nanosecond, after links and PATH, or that it is
not there. The record is given again only while every identity and the machine's boot
are the same, else the component is probed again.

Why that is the probe's answer: any write to a file, a rename over it, a new link or a
new file on PATH gives it another identity, and a file's change time is the kernel's
clock when it changed, which no user can set. Two exceptions, both kept out: a file
changed within the clock's tick of being read could change again unseen (git's "racy"
files), so a record whose files changed in the seconds before its probe ended is not
kept; and a network file system may answer from attributes it cached, so only files on
file systems of the machine itself (LOCAL_FILE_SYSTEMS) are kept.

A record is also kept only for the code that probed it (code_digest): a probe changed
to record another field, or to read another file, is never answered by the old one's.
A probe that names no file, or a record that is not kept, costs what it always did.
The cache is one JSON file; one that is missing, unreadable or not writable (not root)
is no cache, never an error.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from quicbed.hostparam import STATE_DIR
from quicbed.paths import Reads, Run

#: quicbed's own code, whose every module code_digest reads
PACKAGE = Path(__file__).resolve().parent.parent
#: the controller's cache of records (under /run: gone at reboot, as the boots it names)
CACHE_FILE = Path(STATE_DIR) / "software-records.json"
#: the records kept at most; the least recently used go first (a test's temporary
#: programs would otherwise pile up)
MAX_RECORDS = 256
#: a file whose change time is within this many seconds before its probe ended may have
#: changed again within the clock's tick: its record is not kept
RACY_S = 2.0
#: file systems (``stat -f -c %T``) whose attributes are the machine's own, never cached
#: from another machine's answer
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2/ext3", "xfs", "btrfs", "tmpfs", "overlayfs", "zfs", "squashfs", "ramfs", "f2fs"}
)

#: the machine's boot and clock, then each file as ``name<TAB>path<TAB>identity``, where
#: identity is the file system's type, device, inode, size, modification and change
#: times and the change time's whole seconds (the last field); ``missing`` where the
#: file is not there (or a name is not on PATH)
_IDENTIFY = r"""
cat /proc/sys/kernel/random/boot_id && date +%s.%N || exit 1
for f do
  case $f in */*) p=$f ;; *) p=$(command -v -- "$f") || p= ;; esac
  case $p in /*) ;; *) printf '%s\tmissing\n' "$f"; continue ;; esac
  if fs=$(stat -f -L -c %T -- "$p" 2>/dev/null) &&
     s=$(stat -L -c '%d %i %s %y %z %Z' -- "$p" 2>/dev/null); then
    printf '%s\t%s\t%s %s\n' "$f" "$p" "$fs" "$s"
  else
    printf '%s\tmissing\n' "$f"
  fi
done
"""


@functools.cache
def code_digest() -> str:
    """The SHA-256 of quicbed's code as this process found it (every module's path and
    bytes): an edit anywhere probes every component again, once."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(f"{path.relative_to(PACKAGE)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def identify(run: Run, files: list[str]) -> dict[str, Any] | None:
    """The machine's boot and clock and each file's identity where ``run`` asks, in one
    command (on an ssh testbed one round trip); None where it could not be asked."""
    text = run(["sh", "-c", _IDENTIFY, "sh", *files])
    lines = (text or "").splitlines()
    if len(lines) != 2 + len(files):
        return None
    boot, now, *rest = lines
    try:
        clock = float(now)
    except ValueError:
        return None
    return {"boot": boot, "now": clock, "files": rest}


def _keepable(ident: dict[str, Any], probe_s: float) -> bool:
    """Whether a record read from files of ``ident`` can be given again: every file there
    or missing, on a local file system, and unchanged for RACY_S before the probe began."""
    began = ident["now"] - probe_s - RACY_S
    for line in ident["files"]:
        parts = line.split("\t")
        if parts[1:] == ["missing"]:
            continue
        fields = parts[-1].split()
        if fields[0] not in LOCAL_FILE_SYSTEMS or int(fields[-1]) + 1 > began:
            return False
    return True


def _still_so(entry: Any, run: Run) -> TypeGuard[dict[str, Any]]:
    """Whether a kept ``entry`` still holds where ``run`` asks: probed by this code, the
    same boot and every file's identity the same (an entry not of this module's shape
    is none)."""
    if not isinstance(entry, dict) or "record" not in entry:
        return False
    if entry.get("code") != code_digest():
        return False
    files, boot = entry.get("files"), entry.get("boot")
    if not files or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return False
    ident = identify(run, [line.split("\t")[0] for line in files])
    return ident is not None and (ident["boot"], ident["files"]) == (boot, files)


def _used(entry: dict[str, Any]) -> float:
    """When an entry was last given or made (0: never said)."""
    used = entry.get("used")
    return float(used) if isinstance(used, int | float) else 0.0


class SoftwareCache:
    """The controller's kept records (CACHE_FILE), read once and written back once per
    software record: ``probed`` per component, then ``save``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or CACHE_FILE
        self.records: dict[str, Any] = {}
        self.changed = False
        #: how each component's record was found this time: "kept" or "probed"
        self.outcomes: dict[str, str] = {}
        try:
            loaded = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(loaded, dict):  # entries of another shape are dropped at once
            self.records = {k: v for k, v in loaded.items() if isinstance(v, dict)}

    def probed(self, run: Run, key: str, probe: Callable[[Run], Any]) -> Any:
        """``probe``'s record where ``run`` asks, kept under ``key`` (which names the
        machine and what the probe is given): the kept one while its files are the same,
        else probed again and kept where its files allow."""
        entry = self.records.get(key)
        if _still_so(entry, run):
            entry["used"] = time.time()
            self.changed = True
            self.outcomes[key] = "kept"
            return copy.deepcopy(entry["record"])
        reading = Reads(run)
        start = time.monotonic()
        record = probe(reading)
        took = time.monotonic() - start
        self.outcomes[key] = "probed"
        if self.records.pop(key, None) is not None:
            self.changed = True
        if reading.files:
            ident = identify(run, reading.files)
            if ident and _keepable(ident, took):
                self.records[key] = {
                    "code": code_digest(),
                    "boot": ident["boot"],
                    "files": ident["files"],
                    "record": copy.deepcopy(record),
                    "used": time.time(),
                }
                self.changed = True
        return record

    def save(self) -> None:
        """Write the records back (the MAX_RECORDS most recently used), atomically: two
        processes saving at once lose one's new records, never the file."""
        if not self.changed:
            return
        recent = sorted(self.records.items(), key=lambda kv: -_used(kv[1]))
        text = json.dumps(dict(recent[:MAX_RECORDS]), indent=1, sort_keys=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")  # as link.kept writes
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return
        self.changed = False
