"""The link model: one Dummynet pipe per direction, resolved from a user's condition.

A user states a condition the way papers do (rate, RTT, end-to-end loss, jitter,
queue in BDPs). Every shaper consumes the same resolved per-direction pipes, so
the three shapers cannot disagree about what "1 % loss" or "2 x BDP" means.

Conventions (documented in docs/link.md):
- Rates count Ethernet frame bytes (14-byte header included, no FCS or preamble),
  as Dummynet does on a layer-2 bridge; ``count="ip"`` counts IP bytes instead.
- ``rtt_ms`` is split evenly between the two directions.
- ``loss_pct`` is end to end, split evenly (the reference study's "1 %" = 0.5 %
  each way); ``loss_down_pct``/``loss_up_pct`` set a direction explicitly.
- Jitter: for the ``reorder`` and ``smooth`` kinds +/- ``jitter_ms`` per direction
  around that direction's delay; for ``step`` (the reference study's) ``jitter_ms`` is
  the whole range, +/- ``jitter_ms``/2 per direction (the study's "50 ms jitter").
- The queue default is 2 x BDP (rate x base RTT), never below 10 full frames.
"""

from __future__ import annotations

import ipaddress
import math
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quicbed.errors import QuicbedError, from_validation
from quicbed.model import capacity

#: Largest frame on the veths with offloads off: 1500-byte MTU + 14-byte header.
MAX_FRAME = 1514
ETH_HEADER = 14
MIN_QUEUE_FRAMES = 10
#: Physical ranges a condition must lie in (docs/link.md). Beyond them no shaper here
#: is faithful (10 Gbit/s is past what the emulator forwards on veths; a rate under
#: 10 kbit/s rounds towards a pipe with no rate) and no page load would finish in a
#: sensible time, so such a value is a typo, not an experiment.
MIN_RATE_MBIT = 0.01
MAX_RATE_MBIT = 10_000.0
MAX_DELAY_MS = 10_000.0
MAX_SEED = 2**63 - 1  # the emulator's seed is an int64
#: iperf3 TCP seconds per direction of a fidelity receipt: a bound on a typo, not a rule
MAX_TCP_SECONDS = 300.0
#: iperf3 TCP seconds per direction of a receipt unless a spec or flag says otherwise
RECEIPT_TCP_SECONDS: float = 10  # an int, as specs and their digests have always had it


#: the step kind's shortest re-draw interval (ms): below it a "step" is per-packet noise
MIN_STEP_INTERVAL_MS = 1.0


class JitterKind(StrEnum):
    """The named jitter experiments (methodology.md section 3), which differ in reordering."""

    none = "none"
    reorder = "reorder"  # i.i.d. per-packet delay: packets overtake each other
    smooth = "smooth"  # delay drifts over time, packet order is kept
    #: the reference study's: a level re-drawn every interval, uniform in delay +/-
    #: jitter/2, decreases in two half-steps; packets overtake only where it drops
    step = "step"


#: what the jitter number means, per kind (help texts and errors say it the same way)
JITTER_MEANING = (
    "reorder and smooth: +/- that many ms per direction; "
    "step: the whole range, +/- half of it per direction"
)


class Pipe(BaseModel):
    """One direction of the link, fully resolved: what every shaper applies."""

    model_config = ConfigDict(frozen=True)

    rate_bps: int | None  # None = unlimited
    delay_us: int
    jitter_us: int
    jitter_kind: JitterKind
    jitter_interval_us: int
    loss: float  # probability in [0, 1)
    queue_bytes: int | None
    queue_packets: int | None
    count: Literal["ethernet", "ip"]
    #: an ECN-capable packet finding this many bytes queued is marked CE (None: never)
    ecn_threshold_bytes: int | None = None
    #: a time-varying capacity (rate_bps is then None): {"kind": "trace", "trace": name,
    #: "sha256": the trace's digest} or {"kind": "schedule", "steps": [{duration_us,
    #: rate_bps, delay_us}]}; None: the constant rate
    capacity: dict[str, Any] | None = None
    #: extra one-way delay after the bottleneck for frames of these server-side IPv4
    #: addresses (a replayed page's origins: LinkCondition.origin_rtt), in microseconds;
    #: None: none
    address_delay_us: dict[str, int] | None = None


def parse_origin_rtt(text: str) -> dict[str, float]:
    """``IP=MS,...`` (a condition's ``origin_rtt``) as {address: extra RTT in ms}, each
    address an IPv4 one and each RTT in [0, MAX_DELAY_MS]; an error names the bad part."""
    out: dict[str, float] = {}
    for part in str(text).split(","):
        ip, sep, ms = part.strip().partition("=")
        try:
            addr = ipaddress.ip_address(ip.strip())
        except ValueError:
            addr = None
        if not sep or not isinstance(addr, ipaddress.IPv4Address):
            raise ValueError(f"origin_rtt {part.strip()!r}: give IPv4=MS (10.10.1.100=40)")
        try:
            v = float(ms)
        except ValueError:
            raise ValueError(f"origin_rtt {part.strip()!r}: {ms!r} is not a number of ms") from None
        if not (0 <= v <= MAX_DELAY_MS):
            raise ValueError(
                f"origin_rtt {part.strip()!r}: an extra RTT in [0, {MAX_DELAY_MS:g}] ms"
            )
        if str(addr) in out:
            raise ValueError(f"origin_rtt: address {addr} given twice")
        out[str(addr)] = v
    return out


def origin_rtt_text(rtts: dict[str, float]) -> str:
    """The canonical spelling of per-address extra RTTs: by address, each ``IP=MS``."""
    ordered = sorted(rtts.items(), key=lambda kv: ipaddress.IPv4Address(kv[0]))
    return ",".join(f"{ip}={ms:g}" for ip, ms in ordered)


_QUEUE_RE = re.compile(
    r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>bdp|p|pkts|packets|b|kb|kib|mb|mib)\s*$",
    re.IGNORECASE,
)
_QUEUE_BYTES = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2}
#: upper bounds of a queue limit, per kind (a typo guard, far above real buffers)
_QUEUE_MAX = {"bdp": 1000.0, "packets": 1e7, "bytes": 1e11}


def parse_queue(spec: str) -> tuple[str, float]:
    """Parse a queue limit: ``2bdp``, ``100p`` / ``100pkts``, ``450kB``, ``1MiB``.

    Returns (kind, value) with kind in {"bdp", "packets", "bytes"}.
    """
    m = _QUEUE_RE.match(spec)
    if not m:
        raise QuicbedError(f"queue: cannot parse {spec!r} (use e.g. 2bdp, 100pkts, 450kB, 1MiB)")
    num, unit = float(m["num"]), m["unit"].lower()
    if num <= 0:
        raise QuicbedError(f"queue: must be > 0 (got {spec!r})")
    if unit == "bdp":
        kind, value = "bdp", num
    elif unit in ("p", "pkts", "packets"):
        if num != int(num):
            raise QuicbedError(f"queue: a packet count must be whole (got {spec!r})")
        kind, value = "packets", num
    else:
        kind, value = "bytes", num * _QUEUE_BYTES[unit]
    if value > _QUEUE_MAX[kind]:
        raise QuicbedError(
            f"queue: {spec!r} is more than any real buffer holds "
            f"(at most {_QUEUE_MAX[kind]:g} {kind})"
        )
    return kind, value


class LinkCondition(BaseModel):
    """A network condition as a researcher states it. Validation names every bad value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_mbit: float | None = Field(
        default=None, description="bottleneck rate in Mbit/s each way; None = unlimited"
    )
    rtt_ms: float | None = Field(default=None, description="base RTT, split evenly")
    delay_down_ms: float | None = None
    delay_up_ms: float | None = None
    loss_pct: float = Field(default=0.0, description="end-to-end loss in %, split evenly")
    loss_down_pct: float | None = None
    loss_up_pct: float | None = None
    jitter_ms: float = Field(default=0.0, description=f"jitter in ms ({JITTER_MEANING})")
    jitter_kind: JitterKind = JitterKind.none
    jitter_interval_ms: float = Field(
        default=100.0,
        description="smooth: time between random delay knots; step: time between re-draws",
    )
    queue: str = "2bdp"
    #: ECN marking: an ECN-capable packet (ECT or CE) that finds at least this much in
    #: the queue (queue syntax in bytes or BDP: 30kB, 0.5bdp) is forwarded marked CE
    #: instead of queued unmarked, as an AQM's step threshold does; None: the queue
    #: only drops (tail drop when full, as without ECN)
    ecn_threshold: str | None = None
    count: Literal["ethernet", "ip"] = "ethernet"
    seed: int = 1
    #: a time-varying link (docs/varying-links.md): a trace of the trace store, by name
    #: (``gen:MODEL:seed=N`` for a generated one), its digest over both directions'
    #: files (filled from the store; a stored condition keeps it, so reading results
    #: needs no store) and its downlink's mean rate (Mbit/s; the queue's BDP)
    trace: str | None = None
    trace_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    trace_mean_mbit: float | None = None
    #: or a schedule, ``RATE[@RTTms]:DURATION,...`` (quicbed.model.capacity), kept in
    #: its canonical spelling
    schedule: str | None = None
    #: where in the trace or schedule every load starts (ms; past its period it wraps):
    #: each load restarts there, so a cell can measure another part of a trace than its
    #: first seconds
    start_ms: float = 0.0
    #: a replayed page's origins at their own distances: extra RTT (ms) per server
    #: address, on top of the link's and after its bottleneck, ``IP=MS,...`` in its
    #: canonical spelling (origin_rtt_text); filled by a cell's ``origin_rtt`` setting
    #: from its archive (quicbed.spec.cellconfig); None: every address at the link's RTT
    origin_rtt: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _resolve_capacity(cls, data: Any) -> Any:
        """A trace named without its digest is read from the store (generated there on
        first use) and its digest and mean rate filled in; a schedule is respelled
        canonically, so 50mbit:2000ms and 50:2s are one cell."""
        if not isinstance(data, dict):
            return data
        if data.get("trace") is not None and data.get("trace_sha256") is None:
            if not isinstance(data["trace"], str):
                raise ValueError(f"trace {data['trace']!r}: a trace's name")
            t = capacity.load(data["trace"])
            data = {**data, "trace_sha256": t.sha256, "trace_mean_mbit": t.mean_mbit("down")}
        if isinstance(data.get("schedule"), str):
            steps = capacity.parse_schedule(data["schedule"])
            data = {**data, "schedule": capacity.schedule_text(steps)}
        if data.get("origin_rtt") is not None:
            data = {**data, "origin_rtt": origin_rtt_text(parse_origin_rtt(data["origin_rtt"]))}
        return data

    @model_validator(mode="after")
    def _check(self) -> LinkCondition:
        # Every comparison below is written so that NaN fails it: NaN compares false.
        if self.rate_mbit is not None and not (
            self.rate_mbit > 0 and math.isfinite(self.rate_mbit)
        ):
            raise ValueError(f"rate must be > 0 Mbit/s (got {self.rate_mbit:g})")
        if self.rate_mbit is not None and not (MIN_RATE_MBIT <= self.rate_mbit <= MAX_RATE_MBIT):
            raise ValueError(
                f"rate must be in [{MIN_RATE_MBIT:g}, {MAX_RATE_MBIT:g}] Mbit/s "
                f"or unlimited (got {self.rate_mbit:g})"
            )
        if self.rtt_ms is not None and (
            self.delay_down_ms is not None or self.delay_up_ms is not None
        ):
            raise ValueError("give either rtt or per-direction delays, not both")
        for name in ("rtt_ms", "delay_down_ms", "delay_up_ms"):
            v = getattr(self, name)
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{name.removesuffix('_ms')} must be >= 0 ms (got {v:g})")
            if v is not None and v > MAX_DELAY_MS:
                raise ValueError(
                    f"{name.removesuffix('_ms')} must be at most {MAX_DELAY_MS:g} ms (got {v:g})"
                )
        for name in ("loss_pct", "loss_down_pct", "loss_up_pct"):
            v = getattr(self, name)
            if v is not None and not (0 <= v < 100):
                raise ValueError(f"{name.removesuffix('_pct')} must be in [0, 100) % (got {v:g})")
        if not (0 <= self.jitter_ms <= MAX_DELAY_MS):
            raise ValueError(f"jitter must be in [0, {MAX_DELAY_MS:g}] ms (got {self.jitter_ms:g})")
        if self.jitter_ms > 0 and self.jitter_kind == JitterKind.none:
            raise ValueError(
                f"jitter {self.jitter_ms:g} ms needs a jitter kind: reorder, smooth or step"
            )
        if not (0 < self.jitter_interval_ms <= MAX_DELAY_MS):
            raise ValueError(
                f"jitter interval must be in (0, {MAX_DELAY_MS:g}] ms "
                f"(got {self.jitter_interval_ms:g})"
            )
        if not (0 <= self.seed <= MAX_SEED):
            raise ValueError(f"seed must be in [0, {MAX_SEED}] (got {self.seed})")
        for direction, d in (("down", self.delay_down()), ("up", self.delay_up())):
            if self.jitter_kind == JitterKind.smooth and self.jitter_ms > d:
                raise ValueError(
                    f"smooth jitter {self.jitter_ms:g} ms is larger than the {direction} "
                    f"delay {d:g} ms (a delay cannot go below zero)"
                )
            # in the emulator's microseconds, as it checks them
            if self.jitter_kind == JitterKind.step and (
                round(self.jitter_ms * 1000) / 2 > round(d * 1000)
            ):
                raise ValueError(
                    f"step jitter {self.jitter_ms:g} ms (+/- {self.jitter_ms / 2:g} ms) is "
                    f"larger than the {direction} delay {d:g} ms can absorb (a delay cannot "
                    "go below zero; a step jitter's range is at most twice the delay)"
                )
        if self.jitter_kind == JitterKind.step and self.jitter_ms > 0:
            if self.jitter_interval_ms < MIN_STEP_INTERVAL_MS:
                raise ValueError(
                    f"step jitter is re-drawn at most every {MIN_STEP_INTERVAL_MS:g} ms "
                    f"(got jitter interval {self.jitter_interval_ms:g} ms)"
                )
            if self.jitter_ms > self.jitter_interval_ms:
                raise ValueError(
                    f"step jitter {self.jitter_ms:g} ms needs a jitter interval of at least "
                    f"{self.jitter_ms:g} ms (got {self.jitter_interval_ms:g} ms): a half-step's "
                    "overtaking must be over before the next re-draw"
                )
        self._check_varying()
        kind, value = parse_queue(self.queue)
        if kind == "bdp" and self.rated() and self.rtt() == 0:
            raise ValueError(f"queue {self.queue!r} is relative to a BDP, but the RTT is 0")
        if kind == "bytes" and value < MAX_FRAME:
            raise ValueError(f"queue {self.queue!r} holds less than one {MAX_FRAME}-byte frame")
        if self.ecn_threshold is not None:
            self._check_ecn()
        return self

    def _check_varying(self) -> None:
        """A trace or a schedule sets the rate (and a schedule the delay's changes): a
        constant rate or jitter beside it would contradict it."""
        kind = self.varying()
        if not (0 <= self.start_ms <= capacity.MAX_START_MS):
            raise ValueError(
                f"start {self.start_ms:g} ms: where each load starts in the trace or schedule, "
                f"in [0, {capacity.MAX_START_MS:g}] ms"
            )
        if kind is None:
            if self.trace_sha256 is not None or self.trace_mean_mbit is not None:
                raise ValueError("trace_sha256 and trace_mean_mbit belong to a trace")
            if self.start_ms:
                raise ValueError(
                    f"start {self.start_ms:g} ms: a start in a trace or schedule needs one"
                )
            return
        if self.trace is not None and self.schedule is not None:
            raise ValueError("give either a trace or a schedule, not both")
        what = f"{kind} {self.trace or self.schedule!r}"
        if self.rate_mbit is not None:
            raise ValueError(
                f"rate {self.rate_mbit:g} Mbit/s and the {what}: the {kind} sets the rate "
                "(leave the rate unset)"
            )
        if self.jitter_ms or self.jitter_kind != JitterKind.none:
            raise ValueError(
                f"jitter and the {what}: a varying link has no jitter of its own "
                "(a schedule's steps change the delay)"
            )
        if self.trace is not None and not (self.trace_mean_mbit or 0) > 0:
            raise ValueError(f"{what}: its mean rate is missing")

    def varying(self) -> Literal["trace", "schedule"] | None:
        """Whether the capacity varies over time, and how."""
        if self.trace is not None:
            return "trace"
        if self.schedule is not None:
            return "schedule"
        return None

    def rated(self) -> bool:
        """Whether the link has a bottleneck: a rate, a trace or a schedule."""
        return self.rate_mbit is not None or self.varying() is not None

    def mean_rate_mbit(self) -> float | None:
        """The rate, or a varying link's mean (a trace's downlink; a schedule's
        time-weighted); None: unlimited."""
        if self.trace is not None:
            return self.trace_mean_mbit
        if self.schedule is not None:
            return capacity.schedule_mean_mbit(capacity.parse_schedule(self.schedule))
        return self.rate_mbit

    def _check_ecn(self) -> None:
        t = self.ecn_threshold
        if not self.rated():
            raise ValueError(f"ecn_threshold {t!r} needs a rate (an unlimited link has no queue)")
        try:
            kind, _ = parse_queue(str(t))
        except QuicbedError as exc:
            raise ValueError(str(exc).replace("queue:", "ecn_threshold:", 1)) from None
        if kind == "packets":
            raise ValueError(f"ecn_threshold {t!r}: give it in bytes or BDP (30kB, 0.5bdp)")
        qb, _ = self.queue_limit()
        mark = self.ecn_threshold_bytes()
        if qb is not None and mark is not None and mark >= qb:
            raise ValueError(
                f"ecn_threshold {t!r} ({mark} bytes) is not below the queue {self.queue!r} "
                f"({qb} bytes): nothing would be marked before the queue drops"
            )

    # --- derived values -------------------------------------------------------------
    def origin_rtts(self) -> dict[str, float]:
        """Each delayed server address's extra RTT (ms), by address ({}: none)."""
        return {} if self.origin_rtt is None else parse_origin_rtt(self.origin_rtt)

    def address_delays_us(self, direction: str) -> dict[str, int] | None:
        """One direction's share of each address's extra RTT (us): half each way, the
        odd microsecond down, so the two add up to it exactly; None: none."""
        rtts = self.origin_rtts()
        if not rtts:
            return None
        out = {}
        for ip, ms in rtts.items():
            total = round(ms * 1000)
            down = total - total // 2
            out[ip] = down if direction == "down" else total - down
        return out

    def delay_down(self) -> float:
        if self.delay_down_ms is not None:
            return self.delay_down_ms
        return (self.rtt_ms or 0.0) / 2

    def delay_up(self) -> float:
        if self.delay_up_ms is not None:
            return self.delay_up_ms
        return (self.rtt_ms or 0.0) / 2

    def rtt(self) -> float:
        """Base RTT in ms (no jitter, no serialization)."""
        return self.delay_down() + self.delay_up()

    def loss_down(self) -> float:
        """Per-direction loss probability (not %)."""
        pct = self.loss_down_pct if self.loss_down_pct is not None else self.loss_pct / 2
        return pct / 100

    def loss_up(self) -> float:
        pct = self.loss_up_pct if self.loss_up_pct is not None else self.loss_pct / 2
        return pct / 100

    def bdp_bytes(self) -> int | None:
        """Bandwidth-delay product at the base RTT (a varying link's: at its mean rate);
        None when the rate is unlimited."""
        rate = self.mean_rate_mbit()
        if rate is None:
            return None
        return int(rate * 1e6 * self.rtt() / 1000 / 8)

    def queue_limit(self) -> tuple[int | None, int | None]:
        """(bytes, packets) limit of each direction's FIFO; exactly one is set if rated."""
        if not self.rated():
            return None, None
        kind, value = parse_queue(self.queue)
        if kind == "packets":
            return None, int(value)
        if kind == "bdp":
            value = value * (self.bdp_bytes() or 0)
        return max(int(value), MIN_QUEUE_FRAMES * MAX_FRAME), None

    def ecn_threshold_bytes(self) -> int | None:
        """The marking threshold in bytes (None: no marking)."""
        if self.ecn_threshold is None or not self.rated():
            return None
        kind, value = parse_queue(self.ecn_threshold)
        if kind == "bdp":
            value = value * (self.bdp_bytes() or 0)
        return int(value)

    def socket_buffer_bytes(self) -> int:
        """Socket buffers on both hosts: 4 x BDP, never below Linux's 6 MiB default maximum.

        The reference study asked for at least 2 x BDP. With a 2 x BDP queue a
        sender's window must cover BDP + queue, and Linux advertises only about half
        of a receive buffer as window (tcp_adv_win_scale 1), so 2 x BDP caps TCP
        below the rate once the queue fills (measured: 840 of 956 Mbit/s at
        1 Gbit/s, 36 ms); 4 x BDP reaches the rate.
        """
        bdp = self.bdp_bytes() or 0
        return max(4 * bdp, 6 * 1024 * 1024)

    def pipes(self) -> dict[str, Pipe]:
        qb, qp = self.queue_limit()
        rate = None if self.rate_mbit is None else round(self.rate_mbit * 1e6)
        out = {}
        for name, delay, loss in (
            ("down", self.delay_down(), self.loss_down()),
            ("up", self.delay_up(), self.loss_up()),
        ):
            out[name] = Pipe(
                rate_bps=rate,
                delay_us=round(delay * 1000),
                jitter_us=round(self.jitter_ms * 1000),
                jitter_kind=self.jitter_kind,
                jitter_interval_us=round(self.jitter_interval_ms * 1000),
                loss=loss,
                queue_bytes=qb,
                queue_packets=qp,
                count=self.count,
                ecn_threshold_bytes=self.ecn_threshold_bytes(),
                capacity=self._capacity(name, delay),
                address_delay_us=self.address_delays_us(name),
            )
        return out

    def _capacity(self, direction: str, delay_ms: float) -> dict[str, Any] | None:
        """A direction's varying capacity as its pipe carries it (Pipe.capacity)."""
        start = {"start_us": round(self.start_ms * 1000)} if self.start_ms else {}
        if self.trace is not None:
            return {"kind": "trace", "trace": self.trace, "sha256": self.trace_sha256, **start}
        if self.schedule is None:
            return None
        steps = []
        for st in capacity.parse_schedule(self.schedule):
            d = delay_ms if st.rtt_ms is None else st.rtt_ms / 2
            steps.append(
                {
                    "duration_us": round(st.duration_ms * 1000),
                    "rate_bps": round(st.rate_mbit * 1e6),
                    "delay_us": round(d * 1000),
                }
            )
        return {"kind": "schedule", "steps": steps, **start}

    def rate_label(self) -> str:
        """The rate as a label shows it: ``50 Mbit/s``, ``unlimited``, or a varying
        link's trace or schedule in its place."""
        start = f" from {self.start_ms / 1000:g} s" if self.start_ms else ""
        if self.trace is not None:
            return f"trace {self.trace}{start} (mean {self.trace_mean_mbit:.3g} Mbit/s down)"
        if self.schedule is not None:
            return f"schedule {self.schedule}{start}"
        return "unlimited" if self.rate_mbit is None else f"{self.rate_mbit:g} Mbit/s"

    def label(self) -> str:
        """Short human label, e.g. ``50 Mbit/s, 36 ms, 1 % loss``."""
        parts = [self.rate_label()]
        parts.append(f"{self.rtt():g} ms")
        if self.loss_pct or self.loss_down_pct or self.loss_up_pct:
            parts.append(f"loss {self.loss_down() * 100:g}/{self.loss_up() * 100:g} % down/up")
        if self.jitter_ms and self.jitter_kind == JitterKind.step:
            parts.append(
                f"jitter {self.jitter_ms:g} ms step (+/- {self.jitter_ms / 2:g} ms "
                f"every {self.jitter_interval_ms:g} ms)"
            )
        elif self.jitter_ms:
            parts.append(f"jitter {self.jitter_ms:g} ms {self.jitter_kind.value}")
        parts.append(f"queue {self.queue}")
        if self.ecn_threshold:
            parts.append(f"ECN marks from {self.ecn_threshold}")
        rtts = self.origin_rtts()
        if rtts:
            lo, hi = min(rtts.values()), max(rtts.values())
            span = f"+{lo:g} ms" if lo == hi else f"+{lo:g}..{hi:g} ms"
            parts.append(f"{len(rtts)} origin(s) {span}")
        return ", ".join(parts)


def make_condition(**kwargs: object) -> LinkCondition:
    """Build a LinkCondition, turning pydantic's report into one QuicbedError line."""
    from pydantic import ValidationError

    try:
        return LinkCondition(**kwargs)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise from_validation(exc, "link condition") from None


def check_tcp_seconds(seconds: float, option: str) -> float:
    """``seconds`` of iperf3 TCP per direction, or an error naming ``option``.

    NaN would reach subprocess timeouts (and crash there), 1e12 would hang a receipt.
    """
    if not (0 < seconds <= MAX_TCP_SECONDS):
        raise QuicbedError(f"{option} must be in (0, {MAX_TCP_SECONDS:g}] s (got {seconds:g})")
    return seconds
