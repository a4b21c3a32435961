"""Make the PyPI release of geni-lib (0.9.9.4, 2020) run on Python 3.11, in place.

Why this exists: ``profile.py`` is a geni-lib script. On Emulab/CloudLab the portal
runs it with *its own, maintained* geni-lib, so nothing here is needed there. The
only release on PyPI, 0.9.9.4, predates Python 3.11 support, so without these
fixes ``profile.py`` could not be rendered offline, and the tests that render it for
every parameter combination could not run. These fixes serve offline rendering and
tests only; they never reach a testbed node or the portal.

What is wrong with the release on Python 3 (each fix below says which):

- ``geni/portal.py`` still has four Python 2 ``print`` statements, so
  ``import geni.portal`` is a SyntaxError, and it calls ``raw_input`` when it asks
  for parameters interactively (``GENILIB_PARAMS_ASK``).
- ``Request.writeXML`` (used by ``printRequestRSpec``) writes the ``bytes`` that
  ``lxml.etree.tostring`` returns to a text stream (stdout, or a file opened ``"w+"``).
- geni-lib imports ``six`` without declaring it; ``requirements.txt`` pins it (that is
  a missing dependency, not a patch).

How: each fix is an exact text replacement in one installed file. Before a file is
written, its SHA-256 must equal the hash that pip recorded at install time (the
wheel's ``RECORD``), so we only ever patch the pristine release; a file that is
already patched is recognised by undoing the replacements and finding the recorded
hash again. Anything else (another version, a local edit) is an error, never a guess.
The module is idempotent: run it after every ``pip install`` (the Makefile's ``venv``
target does). geni-lib's code is never copied into this repository.

A tool of quicbed's development set-up, not of the ``quicbed`` package: nothing that
runs experiments imports it.

Run: ``python tools/genilib_compat.py`` (patches the interpreter's own
site-packages, then renders a small request in a fresh interpreter to verify).
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

GENILIB_VERSION = "0.9.9.4"
DIST_INFO = f"geni_lib-{GENILIB_VERSION}.dist-info"


class CompatError(Exception):
    """The installed geni-lib is not the release these fixes are for, or they did not work."""


@dataclass(frozen=True)
class Fix:
    """One exact text replacement in one file of the release (path as in its RECORD)."""

    path: str
    old: str
    new: str
    why: str


FIXES: tuple[Fix, ...] = (
    Fix(
        "geni/portal.py",
        'val = raw_input("%s (%s) [%s]: "',
        'val = input("%s (%s) [%s]: "',
        "raw_input is Python 2 only (interactive parameters, GENILIB_PARAMS_ASK)",
    ),
    Fix(
        "geni/portal.py",
        "print param.longDescription",
        "print(param.longDescription)",
        "Python 2 print statement: SyntaxError on import",
    ),
    Fix(
        "geni/portal.py",
        'print "No help available for this parameter"',
        'print("No help available for this parameter")',
        "Python 2 print statement: SyntaxError on import",
    ),
    Fix(
        "geni/portal.py",
        "print \"ERROR: Could not coerce '%s' to '%s'\" % (val, opts['type'])",
        "print(\"ERROR: Could not coerce '%s' to '%s'\" % (val, opts['type']))",
        "Python 2 print statement: SyntaxError on import",
    ),
    Fix(
        "geni/portal.py",
        "print \"ERROR: Illegal value '%s'\" % (val,),[name]",
        "print(\"ERROR: Illegal value '%s'\" % (val,), [name])",
        "Python 2 print statement: SyntaxError on import",
    ),
    Fix(
        "geni/rspec/pg.py",
        "    buf = self.toXMLString(True)\n    f.write(buf)",
        "    buf = self.toXMLString(True, ucode=True)\n    f.write(buf)",
        "printRequestRSpec wrote lxml's bytes to a text stream: TypeError",
    ),
)


def _sha256_b64(data: bytes) -> str:
    """The hash in RECORD's format: urlsafe base64 of SHA-256, no padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def site_root() -> Path:
    """The site-packages directory that holds this interpreter's geni-lib.

    find_spec does not execute the package, so this works before it is fixed.
    """
    spec = importlib.util.find_spec("geni")
    if spec is None or spec.origin is None:
        raise CompatError(
            f"geni-lib is not installed for {sys.executable}; "
            f"install it with: pip install geni-lib=={GENILIB_VERSION}"
        )
    return Path(spec.origin).parent.parent


def recorded_hashes(root: Path) -> dict[str, str]:
    """path -> SHA-256 (RECORD format) of every file of the release under ``root``."""
    record = root / DIST_INFO / "RECORD"
    if not record.is_file():
        found = sorted(p.name for p in root.glob("geni_lib-*.dist-info"))
        raise CompatError(
            f"geni-lib {GENILIB_VERSION} is not what is installed in {root} "
            f"(found: {', '.join(found) or 'no geni_lib dist-info'}); these fixes are for "
            f"exactly {GENILIB_VERSION}: pip install --force-reinstall geni-lib=={GENILIB_VERSION}"
        )
    hashes: dict[str, str] = {}
    with record.open(newline="") as f:
        for row in csv.reader(f):
            if len(row) >= 2 and row[1].startswith("sha256="):
                hashes[row[0]] = row[1].removeprefix("sha256=")
    return hashes


def _fixes_by_file(fixes: tuple[Fix, ...]) -> dict[str, list[Fix]]:
    out: dict[str, list[Fix]] = {}
    for fix in fixes:
        out.setdefault(fix.path, []).append(fix)
    return out


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    count = text.count(old)
    if count != 1:
        raise CompatError(f"{where}: expected {old!r} exactly once, found it {count} times")
    return text.replace(old, new)


def _pristine(text: str, fixes: list[Fix], where: str) -> str:
    """Undo ``fixes`` on an already patched text (the inverse of patching)."""
    for fix in fixes:
        text = _replace_once(text, fix.new, fix.old, where)
    return text


def apply_fixes(
    root: Path, fixes: tuple[Fix, ...] = FIXES, *, write: bool = True
) -> dict[str, str]:
    """Patch the release under ``root``; returns path -> "patched" | "already patched".

    Idempotent. Refuses (CompatError) any file that is neither the recorded
    release nor exactly the release plus these fixes. ``write=False`` only looks:
    a file still to patch is reported "unpatched".
    """
    hashes = recorded_hashes(root)
    states: dict[str, str] = {}
    for path, file_fixes in _fixes_by_file(fixes).items():
        target = root / path
        data = target.read_bytes()
        text = data.decode("utf-8")
        recorded = hashes.get(path)
        if recorded is None:
            raise CompatError(f"{path} is not in geni-lib {GENILIB_VERSION}'s RECORD")
        if _sha256_b64(data) == recorded:
            if not write:
                states[path] = "unpatched"
                continue
            new_text = text
            for fix in file_fixes:
                new_text = _replace_once(new_text, fix.old, fix.new, path)
            tmp = target.with_name(target.name + ".quicbed-tmp")
            tmp.write_bytes(new_text.encode("utf-8"))
            os.replace(tmp, target)
            # A bytecode cache of the release must never be taken for the fixed source.
            for pyc in target.parent.glob(f"__pycache__/{target.stem}.*.pyc"):
                pyc.unlink()
            states[path] = "patched"
            continue
        try:
            undone = _pristine(text, file_fixes, path)
        except CompatError:
            undone = None
        if undone is not None and _sha256_b64(undone.encode("utf-8")) == recorded:
            states[path] = "already patched"
            continue
        raise CompatError(
            f"{target} is neither geni-lib {GENILIB_VERSION} as released nor that release "
            f"with quicbed's fixes (edited by hand?); reinstall it: "
            f"pip install --force-reinstall --no-deps geni-lib=={GENILIB_VERSION}"
        )
    return states


def restore_pristine(root: Path, fixes: tuple[Fix, ...] = FIXES) -> None:
    """Undo the fixes under ``root`` and prove, by RECORD hash, that it is the release again.

    For tests, which show on a copy that the unpatched release fails.
    """
    hashes = recorded_hashes(root)
    for path, file_fixes in _fixes_by_file(fixes).items():
        target = root / path
        data = target.read_bytes()
        if _sha256_b64(data) != hashes[path]:
            data = _pristine(data.decode("utf-8"), file_fixes, path).encode("utf-8")
            target.write_bytes(data)
        if _sha256_b64(data) != hashes[path]:
            raise CompatError(f"{path}: undoing the fixes did not give the recorded release")


# Rendered in a fresh interpreter so that no module imported before patching is reused:
# the portal Context, a node with an Execute service and a BridgedLink with shaping,
# printed through printRequestRSpec to stdout exactly as a standalone profile does.
_VERIFY = """
import sys
import geni.portal as portal
import geni.rspec.emulab  # noqa: F401 (registers BridgedLink)
import geni.rspec.pg as pg
pc = portal.Context()
request = pc.makeRequestRSpec()
a = request.RawPC("a")
a.addService(pg.Execute(shell="sh", command="true"))
b = request.RawPC("b")
link = request.BridgedLink("link")
link.addInterface(a.addInterface("if0"))
link.addInterface(b.addInterface("if0"))
link.bandwidth = 10000
pc.printRequestRSpec()
"""


def verify(root: Path | None = None) -> None:
    """Render a small request in a fresh interpreter; CompatError with its stderr if not.

    ``root`` puts another copy of geni-lib first on the path (tests use a copy).
    """
    env = dict(os.environ)
    env.pop("GENILIB_PORTAL_MODE", None)
    if root is not None:
        env["PYTHONPATH"] = str(root)
    with tempfile.TemporaryDirectory(prefix="genilib-verify-") as cwd:
        proc = subprocess.run(
            [sys.executable, "-c", _VERIFY],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=cwd,
        )
    if proc.returncode != 0 or "<rspec" not in proc.stdout or "delay" not in proc.stdout:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise CompatError(
            f"geni-lib does not render a request on Python {sys.version.split()[0]} "
            f"(exit {proc.returncode}): {' | '.join(tail) or 'no RSpec on stdout'}"
        )


def main(argv: list[str] | None = None) -> int:
    """Patch this interpreter's geni-lib, then verify it renders; exit 1 with the reason."""
    parser = argparse.ArgumentParser(
        prog="python tools/genilib_compat.py",
        description=f"Apply quicbed's Python 3.11 fixes to geni-lib {GENILIB_VERSION} in place.",
    )
    parser.add_argument(
        "--root", type=Path, help="site-packages holding geni-lib (default: this interpreter's)"
    )
    args = parser.parse_args(argv)
    try:
        root = args.root or site_root()
        states = apply_fixes(root)
        verify(root=args.root)
    except CompatError as e:
        print(f"genilib_compat: {e}", file=sys.stderr)
        return 1
    summary = ", ".join(f"{path} {state}" for path, state in states.items())
    print(f"geni-lib {GENILIB_VERSION}: {summary}; renders on Python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
