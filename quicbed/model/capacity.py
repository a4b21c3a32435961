"""Links whose capacity changes over time: a Mahimahi trace per direction, or a rate
and delay schedule. The user's syntax, the trace store and the arithmetic every
judge shares (how many bytes a trace allows between two instants) live here; the
link emulator (go/internal/linkmodel/capacity.go) follows the same rules, and
docs/varying-links.md states them.

- A **trace** is Mahimahi's format: one integer per line, a millisecond offset at
  which one delivery opportunity of :data:`OPPORTUNITY_BYTES` IP bytes (one MTU-sized
  packet) occurs, non-decreasing, repeated with the period of its last offset. A
  stored trace has a downlink and an uplink file; its digest (over both) is part of
  the cell's identity. ``gen:MODEL[:seed=N][:seconds=S]`` names a trace generated from
  a stated model (quicbed.model.tracegen), made on first use.
- A **schedule** is ``RATE[@RTT]:DURATION,...``: piecewise-constant steps, repeated
  (``50:2s,5@80ms:1s,0:200ms``: 50 Mbit/s for 2 s, 5 Mbit/s at an 80 ms RTT for 1 s,
  an outage of 200 ms). A step without ``@RTT`` has the condition's RTT.
- The emulator starts a trace or schedule again before every load, so each load of
  each arm meets the same part of it.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from quicbed.errors import QuicbedError
from quicbed.model import tracegen
from quicbed.model.mahimahi import OPPORTUNITY_BYTES, mean_mbit, parse_trace, trace_text
from quicbed.paths import REPO_ROOT

#: where traces live unless QUICBED_TRACES says otherwise (imports and generated ones)
DEFAULT_STORE = REPO_ROOT / "traces"
MANIFEST = "trace.json"
DIRECTIONS = ("down", "up")
GENERATED = "gen:"
#: bounds of a schedule (a typo guard, as LinkCondition's bounds are)
MAX_STEPS = 1000
MIN_STEP_MS, MAX_STEP_MS = 1.0, 3_600_000.0
MAX_RATE_MBIT = 10_000.0
#: the latest start in a trace or schedule (a day: the longest trace)
MAX_START_MS = 24 * 3600 * 1000.0


def store() -> Path:
    """The trace store: QUICBED_TRACES, or traces/ in the project."""
    return Path(os.environ.get("QUICBED_TRACES") or DEFAULT_STORE)


# --- traces -------------------------------------------------------------------------
def opportunities_between(offsets: list[int], p0_us: float, p1_us: float) -> int:
    """How many opportunities a trace has at times in (p0, p1] (us from its start),
    counted over its repeats; an offset equal to the period falls on the next cycle's
    zero, as the emulator counts it."""
    if p1_us <= p0_us:
        return 0
    period_us = offsets[-1] * 1000

    def upto(p_us: float) -> int:  # opportunities at times <= p (p >= 0)
        if p_us < 0:
            return 0
        cycles, within = divmod(p_us, period_us)
        return int(cycles) * len(offsets) + bisect.bisect_right(offsets, within / 1000)

    return upto(p1_us) - upto(p0_us)


def peak_mbit(offsets: list[int], window_ms: int = 100) -> float:
    """The most a trace carries over any window of ``window_ms`` (Mbit/s), over one
    period and the wrap into the next."""
    period = offsets[-1]
    times = offsets + [v + period for v in offsets]
    best, j = 0, 0
    for i in range(len(offsets)):
        while j < len(times) and times[j] < times[i] + window_ms:
            j += 1
        best = max(best, j - i)
    return best * OPPORTUNITY_BYTES * 8 / (window_ms / 1000) / 1e6


@dataclass(frozen=True)
class Trace:
    """A stored trace: both directions' offsets, where it came from, and its digest."""

    name: str
    down: list[int]
    up: list[int]
    made: dict[str, object]

    def offsets(self, direction: str) -> list[int]:
        return self.down if direction == "down" else self.up

    def file_sha256(self, direction: str) -> str:
        return hashlib.sha256(trace_text(self.offsets(direction)).encode()).hexdigest()

    @functools.cached_property
    def sha256(self) -> str:
        """The digest over both directions' files: the trace's identity."""
        blob = "".join(f"{d}:{self.file_sha256(d)}\n" for d in DIRECTIONS)
        return hashlib.sha256(blob.encode()).hexdigest()

    def mean_mbit(self, direction: str = "down") -> float:
        return mean_mbit(self.offsets(direction))

    def describe(self) -> str:
        d, u = self.down, self.up
        return (
            f"{self.name}: down {mean_mbit(d):.3g} Mbit/s over {d[-1] / 1000:g} s, "
            f"up {mean_mbit(u):.3g} Mbit/s over {u[-1] / 1000:g} s ({self.made.get('how')})"
        )


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def folder(name: str) -> Path:
    """The store folder of trace ``name`` (a generated trace's name made safe)."""
    safe = name.replace(":", "_").replace("=", "-") if name.startswith(GENERATED) else name
    return store() / safe


def check_name(name: str) -> str:
    if not (name.startswith(GENERATED) or _NAME.match(name)):
        raise QuicbedError(
            f"trace name {name!r}: letters, digits, '.', '_' and '-' (at most 64), or "
            f"{GENERATED}MODEL[:seed=N][:seconds=S] for a generated trace"
        )
    return name


def load(name: str) -> Trace:
    """Trace ``name`` from the store; a generated one is made there on first use."""
    check_name(name)
    f = folder(name)
    if not (f / MANIFEST).is_file():
        if name.startswith(GENERATED):
            return save(generate(name))
        known = ", ".join(sorted(t.name for t in stored())) or "none"
        raise QuicbedError(
            f"trace {name!r} is not in the trace store {store()} (stored: {known}); "
            "import one with `quicbed traces import` or name a generated one, "
            f"{GENERATED}MODEL:seed=N (`quicbed traces models`)"
        )
    return _read(name, str(f), (f / MANIFEST).read_text())


@functools.lru_cache(maxsize=16)
def _read(name: str, where: str, manifest: str) -> Trace:
    """A stored trace, read once per manifest (written last on every save, and naming
    the trace's digest): planning a preset reads each trace for every cell, a cell for
    every load."""
    f = Path(where)
    made = json.loads(manifest)
    down = parse_trace((f / "down").read_text(), f"trace {name} (down)")
    up = parse_trace((f / "up").read_text(), f"trace {name} (up)")
    return Trace(name=name, down=down, up=up, made=made)


def save(trace: Trace, into: Path | None = None) -> Trace:
    """Write ``trace`` into the store, or as the store keeps it into the folder ``into``
    (a package's copy): its manifest last, so a half-written one is not found."""
    f = into or folder(trace.name)
    f.mkdir(parents=True, exist_ok=True)
    for d in DIRECTIONS:
        (f / d).write_text(trace_text(trace.offsets(d)))
    manifest = {**trace.made, "name": trace.name, "sha256": trace.sha256}
    (f / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return trace


def stored() -> list[Trace]:
    """Every trace in the store, by name."""
    if not store().is_dir():
        return []
    names = []
    for m in sorted(store().glob(f"*/{MANIFEST}")):
        names.append(json.loads(m.read_text()).get("name", m.parent.name))
    return [load(n) for n in names]


def import_files(name: str, down: Path, up: Path | None, *, force: bool = False) -> Trace:
    """A user's Mahimahi files stored as trace ``name`` (``up`` None: the downlink's
    file serves both directions). A stored trace of that name and other content is
    kept unless ``force``: cells measured on it name it by its digest."""
    check_name(name)
    if name.startswith(GENERATED):
        raise QuicbedError(f"trace name {name!r}: {GENERATED} names generated traces")
    files = {"down": down, "up": up or down}
    offsets = {}
    for d, p in files.items():
        if not p.is_file():
            raise QuicbedError(f"trace file {p}: no such file")
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            raise QuicbedError(f"trace file {p}: not text (Mahimahi's format)") from None
        offsets[d] = parse_trace(text, f"trace file {p}")
    how = f"imported from {down.name}" + (f" and {up.name}" if up else " (both directions)")
    made: dict[str, object] = {"how": how, "files": {d: str(p) for d, p in files.items()}}
    new = Trace(name=name, down=offsets["down"], up=offsets["up"], made=made)
    if (folder(name) / MANIFEST).is_file() and not force:
        old = load(name)
        if old.sha256 != new.sha256:
            raise QuicbedError(
                f"trace {name!r} is stored with other content (digest {old.sha256[:12]}, "
                f"these files {new.sha256[:12]}): choose another name, or --force"
            )
    return save(new)


def from_file(value: str, base: Path) -> str:
    """A trace given as a Mahimahi file (a spec's or the CLI's path, relative to
    ``base``) stored under a name made from the file and its content, so the same file
    is one trace wherever it is named; any other value (a stored name, ``gen:...``) is
    returned as it is. ``X.down`` takes ``X.up`` beside it as its uplink; any other
    file serves both directions."""
    if value.startswith(GENERATED) or ("/" not in value and not (base / value).is_file()):
        return value
    path = base / value
    if not path.is_file():
        raise QuicbedError(f"trace file {path}: no such file")
    up = path.with_suffix(".up") if path.suffix == ".down" else None
    up = up if up is not None and up.is_file() else None
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem if up else path.name).strip(".-_") or "trace"
    # the digest over both files, as the store's name for them: the same files, one name
    digest = hashlib.sha256(
        path.read_bytes() + b"\0" + (up.read_bytes() if up else b"")
    ).hexdigest()
    name = f"{stem[:40]}-{digest[:10]}"
    if not (folder(name) / MANIFEST).is_file():
        import_files(name, path, up)
    return name


#: where a replication package carries the traces its cells ran on (under results/)
CARRIED = "link-traces"


def carry(used: dict[str, str], dest: Path) -> list[str]:
    """Copy the traces ``used`` (name -> the digest its cells recorded) from the store
    into ``dest`` (a package's results folder's CARRIED), each as the store keeps it;
    returns why any was left out (not in the store, or stored with another digest)."""
    missing = []
    for name, digest in sorted(used.items()):
        try:
            t = load(name)
        except QuicbedError as exc:
            missing.append(f"trace {name}: {exc}")
            continue
        if t.sha256 != digest:
            missing.append(
                f"trace {name}: the store's has digest {t.sha256[:12]}, its cells ran {digest[:12]}"
            )
            continue
        save(t, dest / folder(name).name)
    return missing


def install_carried(src: Path) -> list[str]:
    """Put the traces a package carries (``src``: its CARRIED folder) into the store, so
    its cells rerun on the traces they ran on; a trace already stored with the same
    digest is left as it is, one stored with another is refused by name. Returns the
    names installed."""
    installed = []
    for m in sorted(src.glob(f"*/{MANIFEST}")) if src.is_dir() else []:
        manifest = m.read_text()
        held = json.loads(manifest)
        name = str(held.get("name", ""))
        check_name(name)
        t = _read(name, str(m.parent), manifest)
        if t.sha256 != held.get("sha256"):
            raise QuicbedError(f"{m.parent}: the carried trace {name} does not match its digest")
        if (folder(name) / MANIFEST).is_file():
            mine = load(name)
            if mine.sha256 != t.sha256:
                raise QuicbedError(
                    f"trace {name} is in the trace store {store()} with digest "
                    f"{mine.sha256[:12]}, the package's cells ran {t.sha256[:12]}: set "
                    "QUICBED_TRACES to another folder for this rerun"
                )
            continue
        save(t)
        installed.append(name)
    return installed


def parse_generated(name: str) -> tuple[str, int, float]:
    """(model, seed, seconds) of ``gen:MODEL[:seed=N][:seconds=S]``."""
    parts = name[len(GENERATED) :].split(":")
    model, seed, seconds = parts[0], 1, 60.0
    for p in parts[1:]:
        key, _, value = p.partition("=")
        try:
            if key == "seed":
                seed = int(value)
            elif key == "seconds":
                seconds = float(value)
            else:
                raise ValueError
        except ValueError:
            raise QuicbedError(
                f"trace {name!r}: {p!r} is not seed=N or seconds=S "
                f"({GENERATED}MODEL[:seed=N][:seconds=S])"
            ) from None
    return model, seed, seconds


def generate(name: str) -> Trace:
    """The trace a ``gen:`` name describes, from its model (quicbed.model.tracegen)."""
    model, seed, seconds = parse_generated(name)
    down, up = (
        tracegen.generate(model, seed=seed, seconds=seconds, direction=d) for d in DIRECTIONS
    )
    made = {"how": f"generated: {model}, seed {seed}, {seconds:g} s", "model": model}
    return Trace(name=name, down=down, up=up, made={**made, "seed": seed, "seconds": seconds})


def available_bytes(
    cond_trace: str | None, schedule: str | None, direction: str, p0_us: float, p1_us: float
) -> float:
    """The bytes a varying link's ``direction`` could carry at times in (p0, p1] (us
    from its start), counted as the emulator counts them: a trace's IP bytes, a
    schedule's bits over 8."""
    if cond_trace is not None:
        offsets = load(cond_trace).offsets(direction)
        return opportunities_between(offsets, p0_us, p1_us) * OPPORTUNITY_BYTES
    if schedule is not None:
        return schedule_bits_between(parse_schedule(schedule), p0_us, p1_us) / 8
    raise ValueError("a constant link has no varying capacity")


# --- schedules ----------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One step of a schedule: ``rate_mbit`` (0: an outage) for ``duration_ms``, at
    ``rtt_ms`` (None: the condition's)."""

    rate_mbit: float
    duration_ms: float
    rtt_ms: float | None = None

    def text(self) -> str:
        rtt = "" if self.rtt_ms is None else f"@{self.rtt_ms:g}ms"
        return f"{self.rate_mbit:g}{rtt}:{_duration_text(self.duration_ms)}"


_STEP = re.compile(
    r"^\s*(?P<rate>[0-9.eE+-]+)\s*(?:mbit(?:/s)?)?\s*"
    r"(?:@\s*(?P<rtt>[0-9.eE+-]+)\s*ms)?\s*:\s*(?P<dur>[0-9.eE+-]+)\s*(?P<unit>ms|s)\s*$",
    re.IGNORECASE,
)


def _duration_text(ms: float) -> str:
    return f"{ms / 1000:g}s" if ms >= 1000 and ms % 1000 == 0 else f"{ms:g}ms"


def parse_schedule(text: str) -> list[Step]:
    """The steps of ``RATE[@RTT]:DURATION,...`` (Mbit/s, ms, s or ms), or an error naming
    the bad step."""
    if not isinstance(text, str) or not text.strip():
        raise QuicbedError(f"schedule {text!r}: RATE[@RTTms]:DURATION,... e.g. 50:2s,5@80ms:1s")
    steps = []
    for raw in text.split(","):
        m = _STEP.match(raw)
        if not m:
            raise QuicbedError(
                f"schedule step {raw.strip()!r}: not RATE[@RTTms]:DURATION "
                "(50:2s, 5@80ms:500ms, 0:200ms for an outage)"
            )
        try:
            rate = float(m["rate"])
            rtt = None if m["rtt"] is None else float(m["rtt"])
            dur = float(m["dur"]) * (1000 if m["unit"].lower() == "s" else 1)
        except ValueError:
            raise QuicbedError(f"schedule step {raw.strip()!r}: a number is malformed") from None
        if not (rate == 0 or 0.01 <= rate <= MAX_RATE_MBIT):
            raise QuicbedError(
                f"schedule step {raw.strip()!r}: rate {rate:g} Mbit/s must be 0 (an outage) "
                f"or in [0.01, {MAX_RATE_MBIT:g}]"
            )
        if not (MIN_STEP_MS <= dur <= MAX_STEP_MS):
            raise QuicbedError(
                f"schedule step {raw.strip()!r}: duration {dur:g} ms must be in "
                f"[{MIN_STEP_MS:g}, {MAX_STEP_MS:g}] ms"
            )
        if rtt is not None and not (0 <= rtt <= 20_000 and math.isfinite(rtt)):
            raise QuicbedError(f"schedule step {raw.strip()!r}: RTT {rtt:g} ms must be >= 0")
        steps.append(Step(rate, dur, rtt))
    if len(steps) > MAX_STEPS:
        raise QuicbedError(f"schedule: {len(steps)} steps, at most {MAX_STEPS}")
    if all(s.rate_mbit == 0 for s in steps):
        raise QuicbedError(f"schedule {text!r}: every step is an outage (rate 0)")
    return steps


def schedule_text(steps: list[Step]) -> str:
    """The canonical spelling (what a cell's identity holds)."""
    return ",".join(s.text() for s in steps)


def schedule_mean_mbit(steps: list[Step]) -> float:
    total = sum(s.duration_ms for s in steps)
    return sum(s.rate_mbit * s.duration_ms for s in steps) / total


def schedule_bits_between(steps: list[Step], p0_us: float, p1_us: float) -> float:
    """The bits a schedule carries at times in (p0, p1] (us from its start), over its
    repeats."""
    if p1_us <= p0_us:
        return 0.0
    period_us = sum(s.duration_ms for s in steps) * 1000
    per_period = sum(s.rate_mbit * s.duration_ms * 1000 for s in steps)  # bits

    def upto(p_us: float) -> float:
        cycles, within = divmod(max(p_us, 0.0), period_us)
        bits, t = cycles * per_period, 0.0
        for s in steps:
            d = s.duration_ms * 1000
            bits += s.rate_mbit * min(max(within - t, 0.0), d)
            t += d
        return bits

    return upto(p1_us) - upto(p0_us)
