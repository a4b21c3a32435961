"""Goodput against one axis: the transport-parameter study's line plots (its figures
5.1-5.4), for any bulk scenario that varies one thing.

A scenario's bulk cells vary along one **link axis** (one-way downlink delay, RTT,
downlink or end-to-end loss, rate) when exactly one of those differs between its
cells: one line per arm (a parameter set), its mean goodput over the cell's valid flows
with a +-1 sd band. A scenario of one cell whose arms differ in exactly one QUIC
transport parameter varies along that **parameter**: one line, the arms ordered by
its value. An arm whose client cannot grow its window (``client_flow_control_autotune:
false``) and whose window / RTT is below the link's rate is flow-control limited to
it, drawn as a dashed reference line in the arm's colour (the window: the smaller of its
connection and stream limit; the RTT: the link's base RTT, without the queue's).
A scenario whose cells share their link but differ in one **cell setting** (the
interfaces' offloads) varies along that setting: one group of bars per value, one bar
per arm, mean +-1 sd.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quicbed.model.link import LinkCondition
from quicbed.report.figure import Drawn
from quicbed.report.transfercell import TransferCell
from quicbed.results.transfers import ArmBulk, ArmCompete
from quicbed.settings import sockopts, tparams

#: link axes: (label, how a cell's condition gives its value); the first that varies
LINK_AXES: tuple[tuple[str, str, Any], ...] = (
    ("delay_down", "added delay, downlink (ms)", lambda c: c.delay_down_ms),
    ("rtt", "RTT (ms)", lambda c: c.rtt_ms),
    ("loss_down", "loss, downlink (%)", lambda c: c.loss_down_pct),
    ("loss", "loss (%)", lambda c: c.loss_pct),
    ("rate", "bottleneck rate (Mbit/s)", lambda c: c.rate_mbit),
)
#: cell settings a scenario may vary (a cell row's column, its label): each value is
#: its own cell, every arm measured in it
CELL_AXES: tuple[tuple[str, str], ...] = (("offloads", "interface offloads"),)
#: the window keys of a client whose window stays at its advertised value
_CAP = (tparams.CLIENT + "initial_max_data", tparams.CLIENT + "initial_max_stream_data_bidi_local")


def window_cap_mbit(settings: dict[str, Any], cond: LinkCondition) -> float | None:
    """window / RTT for an arm whose client does not grow its window, where that is
    below the bottleneck's rate (the window then limits the flow); None otherwise."""
    if settings.get(tparams.CLIENT + tparams.AUTOTUNE) is not False:
        return None
    windows = [int(settings[k]) for k in _CAP if settings.get(k) is not None]
    rtt = cond.rtt()
    if not windows or not rtt:
        return None
    cap = float(min(windows) * 8 / (rtt / 1000) / 1e6)
    rate = cond.rate_mbit
    return cap if rate is None or cap < float(rate) else None


def _axis(cells: list[TransferCell]) -> tuple[str, str, Any] | None:
    conds = [c.condition for c in cells]
    varying = [a for a in LINK_AXES if len({json.dumps(a[2](c)) for c in conds}) > 1]
    return varying[0] if len(varying) == 1 else None


def _cell_axis(cells: list[TransferCell]) -> tuple[str, str] | None:
    """The one cell setting in which a scenario's cells differ, where they share their
    link condition (None: not exactly one, or the link differs too)."""
    if len({c.link_key() for c in cells}) > 1:
        return None
    varying = [a for a in CELL_AXES if len({getattr(c, a[0]) or "" for c in cells}) > 1]
    return varying[0] if len(varying) == 1 else None


def _param_axis(cell: TransferCell) -> str | None:
    """The one transport parameter or knob in which a cell's arms differ (None: not
    one). Keys that differ together, with one value per arm (a buffer family setting
    every buffer alike), are one axis, named by the first."""
    settings = [cell.arm_settings(a) for a in cell.arms]
    keys = {k for s in settings for k in s if tparams.is_key(k) or sockopts.is_key(k)}
    differ = [k for k in sorted(keys) if len({json.dumps(s.get(k)) for s in settings}) > 1]
    if not differ or any(s.get(differ[0]) is None for s in settings):
        return None
    if any(s.get(k) != s.get(differ[0]) for k in differ[1:] for s in settings):
        return None
    return str(differ[0])


def _unit(key: str) -> str:
    if tparams.is_key(key):
        return tparams.PARAMS[tparams.base(key)].unit
    return "bytes asked; the kernel doubles it"


def figures(cells: list[TransferCell], out: Path) -> list[Drawn]:
    """Every bulk scenario's goodput-vs-axis figure (see the module docstring)."""
    by_scenario: dict[str, list[TransferCell]] = {}
    for c in cells:
        if c.kind == "bulk" and c.summary:
            by_scenario.setdefault(c.scenario, []).append(c)
    drawn: list[Drawn] = []
    for scenario, group in sorted(by_scenario.items()):
        axis = _axis(group) if len(group) > 1 else None
        if axis is not None:
            drawn.append(_link_figure(scenario, group, axis, out))
        elif len(group) > 1 and (setting := _cell_axis(group)) is not None:
            drawn.append(_setting_figure(scenario, group, setting, out))
        elif len(group) == 1 and (key := _param_axis(group[0])) is not None:
            drawn.append(_param_figure(scenario, group[0], key, out))
    return drawn


def _line(summary: ArmBulk | ArmCompete | None) -> tuple[float | None, float]:
    """A bulk arm's mean goodput and its sd (0 where it has none): the figures' points.
    An arm without a bulk summary has no point."""
    if not isinstance(summary, ArmBulk):
        return None, 0.0
    return summary.goodput_mbit_mean, summary.goodput_mbit_sd or 0.0


def _link_figure(
    scenario: str, cells: list[TransferCell], axis: tuple[str, str, Any], out: Path
) -> Drawn:
    import matplotlib.pyplot as plt

    from quicbed.figsave import save_figure

    name, label, value = axis
    fig, ax = plt.subplots(figsize=(7, 4))
    arms = list(dict.fromkeys(a for c in cells for a in c.arms))
    points = sorted(((float(value(c.condition)), c) for c in cells), key=lambda p: p[0])
    for i, arm in enumerate(arms):
        xs: list[float] = []
        ys: list[float] = []
        sds: list[float] = []
        caps: list[float | None] = []
        for x, c in points:
            mean, sd = _line(c.summary.get(arm))
            if mean is None:
                continue
            xs.append(x)
            ys.append(mean)
            sds.append(sd)
            caps.append(window_cap_mbit(c.arm_settings(arm), c.condition))
        if not xs:
            continue
        color = f"C{i % 10}"
        ax.plot(xs, ys, marker="o", ms=3, lw=1.2, color=color, label=arm)
        ax.fill_between(
            xs,
            [y - s for y, s in zip(ys, sds, strict=True)],
            [y + s for y, s in zip(ys, sds, strict=True)],
            color=color,
            alpha=0.2,
            lw=0,
        )
        capped = [(x, cap) for x, cap in zip(xs, caps, strict=True) if cap is not None]
        if capped:
            ax.plot(
                [x for x, _ in capped],
                [cap for _, cap in capped],
                ls="--",
                lw=0.9,
                color=color,
                label=f"{arm}: window / RTT",
            )
    if name.startswith("loss"):
        ax.set_xscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel("goodput (Mbit/s), mean +-1 sd")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    title = f"bulk, scenario {scenario}: goodput against {label.split(' (')[0]}, per arm"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    paths = save_figure(fig, out / "figures" / f"axis-{scenario}")
    return Drawn(
        title, paths, {"transfer": "bulk", "scenario": scenario, "axis": name, "title": title}
    )


def _param_figure(scenario: str, cell: TransferCell, key: str, out: Path) -> Drawn:
    import matplotlib.pyplot as plt

    cond = cell.condition
    numeric = all(
        isinstance(cell.arm_settings(a).get(key), int | float)
        and not isinstance(cell.arm_settings(a).get(key), bool)
        for a in cell.arms
    )
    if not numeric:
        return _bar_figure(scenario, cell, key, out)
    rows = []
    for arm in cell.arms:
        s = cell.arm_settings(arm)
        mean, sd = _line(cell.summary.get(arm))
        if mean is not None:
            rows.append((float(s[key]), mean, sd, window_cap_mbit(s, cond), arm))
    rows.sort()
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r[0] for r in rows]
    ax.errorbar(
        xs,
        [r[1] for r in rows],
        yerr=[r[2] for r in rows],
        marker="o",
        ms=4,
        capsize=3,
        lw=1.2,
        color="C0",
        label="goodput, mean +-1 sd",
    )
    caps = [(r[0], r[3]) for r in rows if r[3] is not None]
    if caps:
        ax.plot(
            [x for x, _ in caps],
            [c for _, c in caps],
            ls="--",
            lw=0.9,
            color="grey",
            label="window / RTT (no auto-tuning; where below the link rate)",
        )
    for x, y, _, _, arm in rows:
        ax.annotate(arm, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel(f"{key} ({_unit(key)})")
    tops = [r[1] + r[2] for r in rows]
    return _param_done(
        fig, ax, tops, f"bulk, scenario {scenario}: goodput against {key}", key, scenario, out
    )


def _param_done(
    fig: Any, ax: Any, tops: list[float], title: str, key: str, scenario: str, out: Path
) -> Drawn:
    """A goodput-per-parameter figure's axis, legend and title, saved as param-SCENARIO."""
    from quicbed.figsave import save_figure

    ax.set_ylabel("goodput (Mbit/s)")
    ax.set_ylim(bottom=0, top=max([*tops, 1.0]) * 1.15)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    paths = save_figure(fig, out / "figures" / f"param-{scenario}")
    return Drawn(
        title, paths, {"transfer": "bulk", "scenario": scenario, "axis": key, "title": title}
    )


def _bar_figure(scenario: str, cell: TransferCell, key: str, out: Path) -> Drawn:
    """Goodput per value of a switch or a choice (``gso``, ``aead``): one bar per arm,
    mean +-1 sd, labelled with the arm and its value."""
    import matplotlib.pyplot as plt

    bars = []
    for arm in cell.arms:
        v = cell.arm_settings(arm).get(key)
        mean, sd = _line(cell.summary.get(arm))
        if mean is not None:
            shown = str(v).lower() if isinstance(v, bool) else str(v)
            bars.append((f"{arm}\n{key} {shown}", mean, sd))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(
        range(len(bars)),
        [b[1] for b in bars],
        yerr=[b[2] for b in bars],
        capsize=4,
        color="C0",
        label="goodput, mean +-1 sd",
    )
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    tops = [b[1] + b[2] for b in bars]
    return _param_done(
        fig, ax, tops, f"bulk, scenario {scenario}: goodput per {key}", key, scenario, out
    )


def _setting_figure(
    scenario: str, cells: list[TransferCell], setting: tuple[str, str], out: Path
) -> Drawn:
    """Goodput per value of a cell setting: a group of bars per cell (its value), one
    bar per arm in the arm's colour, mean +-1 sd."""
    import matplotlib.pyplot as plt

    key, label = setting
    arms = list(dict.fromkeys(a for c in cells for a in c.arms))
    groups = sorted(cells, key=lambda c: getattr(c, key) or "")
    width = 0.8 / max(len(arms), 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    tops: list[float] = []
    for i, arm in enumerate(arms):
        xs, ys, sds = [], [], []
        for g, c in enumerate(groups):
            mean, sd = _line(c.summary.get(arm))
            if mean is not None:
                xs.append(g - 0.4 + width * (i + 0.5))
                ys.append(mean)
                sds.append(sd)
        if xs:
            ax.bar(xs, ys, width, yerr=sds, capsize=3, color=f"C{i % 10}", label=arm)
            tops += [y + s for y, s in zip(ys, sds, strict=True)]
    names = [(getattr(c, key) or "unset").replace(",", "\n") for c in groups]
    ax.set_xticks(range(len(groups)), names, fontsize=7)
    ax.set_xlabel(label)
    return _param_done(
        fig,
        ax,
        tops,
        f"bulk, scenario {scenario}: goodput per {label}, per arm",
        key,
        scenario,
        out,
    )
