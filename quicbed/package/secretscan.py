"""Find private keys and tokens before they leave the machine in a replication package.

A package is published; one key in a log folder and it is public for good. So the
scan refuses rather than warns, and it looks three ways:

- **names**: files named like private keys or credential stores (``id_ed25519``,
  ``*.key``, ``*.p12``, ``.netrc``, ...);
- **shapes**: content that looks like a private key block (PEM, OpenSSH, PGP,
  PuTTY) or a well-known token format (GitHub, GitLab, AWS, Slack, Google, PyPI,
  npm);
- **TLS key logs** (NSS key log format: ``CLIENT_RANDOM``, ``*_TRAFFIC_SECRET_*``
  lines), which decrypt every captured connection they name: level ``full`` writes
  them (``DIR/traces/.../<arm>-keys.log``); a package includes them only when asked
  (``quicbed package --traces --keys``), and then only those files (``allow``);
- **the user's own secrets**: fragments of the private keys in ``~/.ssh`` and the
  values of environment variables whose names say they hold a secret (``*TOKEN*``,
  ``*SECRET*``, ``*PASSWORD*``, ``*API_KEY*``, ...), wherever they appear.

Gzipped files (HARs) are scanned decompressed and SQLite databases value by value,
so compression or page layout cannot hide a match. A finding names the file and
the rule, never the secret itself.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from quicbed.results.store import table_rows

#: the rules a TLS key log breaks (by name, by content): ``allow`` may excuse only these
KEYLOG_NAME_RULE = "TLS key log file name"
KEYLOG_RULE = "TLS key log (session secrets)"
KEYLOG_RULES = frozenset({KEYLOG_NAME_RULE, KEYLOG_RULE})

#: file names that hold private keys or credentials whatever their content
_NAME_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("SSH private key file name", re.compile(r"^id_(rsa|dsa|ecdsa|ed25519)(_sk)?$|^identity$")),
    ("private key file name", re.compile(r"\.(key|p12|pfx|jks|keystore|ppk)$", re.I)),
    (
        "credentials file name",
        re.compile(r"^(\.netrc|_netrc|\.pgpass|\.git-credentials|\.pypirc)$"),
    ),
    (KEYLOG_NAME_RULE, re.compile(r"(^|[-_.])keys?\.log(\.gz)?$|sslkeylog", re.I)),
]

#: content shapes of private keys and tokens (bytes, so binary files can be scanned)
_CONTENT_RULES: list[tuple[str, re.Pattern[bytes]]] = [
    ("private key block", re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("PuTTY private key", re.compile(rb"PuTTY-User-Key-File-\d")),
    ("GitHub token", re.compile(rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{50,})")),
    ("GitLab token", re.compile(rb"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("AWS access key ID", re.compile(rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("Slack token", re.compile(rb"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("Google API key", re.compile(rb"\bAIza[0-9A-Za-z_-]{35}")),
    ("PyPI token", re.compile(rb"\bpypi-AgE[A-Za-z0-9_-]{50,}")),
    ("npm token", re.compile(rb"\bnpm_[A-Za-z0-9]{36}\b")),
    (
        KEYLOG_RULE,
        re.compile(
            rb"(?m)^(?:CLIENT_RANDOM|(?:CLIENT|SERVER)_(?:HANDSHAKE_|EARLY_)?TRAFFIC_SECRET(?:_\d+)?"
            rb"|(?:EARLY_)?EXPORTER_SECRET) [0-9A-Fa-f]{64} [0-9A-Fa-f]{32,}"
        ),
    ),
]

#: environment variable names that announce a secret value
_SECRET_ENV = re.compile(
    r"TOKEN|SECRET|PASSW|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH", re.I
)
#: shorter values are too likely to occur by chance ("1", "true", a port number)
_MIN_SECRET_LEN = 12
#: a key body line this long is unique to the key
_MIN_KEY_FRAGMENT = 40


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the scanned folder
    rule: str


@dataclass(frozen=True)
class Needle:
    """A secret of this user, known by content; ``label`` says whose, never what."""

    label: str
    data: bytes


def user_needles(
    home: Path | None = None, environ: Mapping[str, str] | None = None
) -> list[Needle]:
    """The user's own secrets to look for: private-key fragments from ``~/.ssh`` and
    the values of secret-named environment variables."""
    home = Path.home() if home is None else home
    environ = os.environ if environ is None else environ
    needles: list[Needle] = []
    ssh = home / ".ssh"
    try:
        candidates = sorted(p for p in ssh.iterdir() if p.is_file())
    except OSError:
        candidates = []
    for key in candidates:
        if key.suffix == ".pub" or key.name in ("known_hosts", "config", "authorized_keys"):
            continue
        try:
            if key.stat().st_size > 64 * 1024:
                continue
            text = key.read_bytes()
        except OSError:
            continue
        if b"PRIVATE KEY" not in text:
            continue
        body = [ln.strip() for ln in text.splitlines() if ln.strip() and b"-----" not in ln]
        for ln in body:
            if len(ln) >= _MIN_KEY_FRAGMENT:
                needles.append(Needle(f"a line of your private key ~/.ssh/{key.name}", ln))
    for name, value in sorted(environ.items()):
        if _SECRET_ENV.search(name) and len(value) >= _MIN_SECRET_LEN and not Path(value).exists():
            needles.append(Needle(f"the value of environment variable {name}", value.encode()))
    return needles


def _contents(path: Path) -> Iterator[bytes]:
    """The bytes a reader of ``path`` would see: decompressed, or value by value."""
    if path.name.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as f:
                yield f.read()
            return
        except (OSError, EOFError, zlib.error):
            pass  # not really gzip: scan it as it is
    if path.name.endswith(".sqlite"):
        for _, row in table_rows(path):
            for v in row:
                if isinstance(v, str):
                    yield v.encode()
                elif isinstance(v, bytes):
                    yield v
        return
    yield path.read_bytes()


def scan_file(path: Path, rel: str, needles: Iterable[Needle] = ()) -> list[Finding]:
    """Every rule that ``path`` (shown as ``rel``) breaks."""
    found = [Finding(rel, rule) for rule, rx in _NAME_RULES if rx.search(path.name)]
    needles = list(needles)
    for blob in _contents(path):
        found += [Finding(rel, rule) for rule, rx in _CONTENT_RULES if rx.search(blob)]
        found += [Finding(rel, n.label) for n in needles if n.data in blob]
    return list(dict.fromkeys(found))


def scan_tree(
    root: Path,
    needles: Iterable[Needle] = (),
    parts: Iterable[str] | None = None,
    allow: Mapping[str, frozenset[str]] | None = None,
) -> list[Finding]:
    """Scan every file below ``root`` (or below its ``parts``, files or folders);
    paths in findings are relative to ``root``.

    ``allow`` excuses, per file (relative path), only the named rules: the key logs a
    user asked to publish break the key-log rules and nothing else may; the same
    bytes anywhere else are still refused.
    """
    allow = allow or {}
    root = Path(root)
    needles = list(needles)
    files: list[Path] = []
    for base in [root / p for p in parts] if parts is not None else [root]:
        if base.is_file():
            files.append(base)
        elif base.is_dir():
            files += sorted(p for p in base.rglob("*") if p.is_file())
    out: list[Finding] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        excused = allow.get(rel, frozenset())
        out += [f for f in scan_file(path, rel, needles) if f.rule not in excused]
    return out
