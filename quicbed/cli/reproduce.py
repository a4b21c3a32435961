"""``quicbed reproduce``: a study's figure or table, or all a study's local ones, by name.

Not registered by itself: quicbed/cli/main.py adds it with ``reproduce_cli.register(app)``.
A sweep runs as ``quicbed run`` runs it (quicbed.cli.runspec.run_spec). The runner and
the report load scipy and matplotlib (0.6 to 0.9 s, python -X importtime -m quicbed
--help): imported where they are used, tagged ``# lazy``, so that --help does not wait.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated

import typer

from quicbed.cli.options import (
    MAX_HOURS,
    KeepOpt,
    MaxHoursOpt,
    SweepTestbedOptions,
    TracesOpt,
    YesOpt,
    options,
)
from quicbed.cli.runspec import SweepRun, run_spec
from quicbed.errors import QuicbedError
from quicbed.run.console import out
from quicbed.spec.catalog import Catalog, Entry, entries_spec, entry_spec, load_catalog
from quicbed.spec.sweepspec import plan

#: what one catalog line shows of an entry that does not run here
_WHY_WIDTH = 90


def minutes(cat: Catalog, entry: Entry) -> float | None:
    """The entry's sweep's pessimistic wall time here (the estimate ``run`` prints)."""
    if entry.status == "not here":
        return None
    from quicbed.run.sweep import estimate  # lazy: scipy, ~0.65 s

    spec = entry_spec(cat, entry)
    return estimate(plan(spec), spec.receipt_tcp_seconds) / 60


def where(entry: Entry) -> str:
    """``long-look.yaml: baseline (pages single)`` or the reason it cannot run."""
    if entry.status == "not here":
        why = str(entry.why)
        return why if len(why) <= _WHY_WIDTH else why[: _WHY_WIDTH - 3] + "..."
    changes = ", ".join(
        f"{k} {v}" if not isinstance(v, dict | list) else k for k, v in (entry.set or {}).items()
    )
    scen = ", ".join(entry.scenarios or [])
    return f"{entry.preset}: {scen}" + (f" ({changes})" if changes else "")


def describe(cat: Catalog, entry: Entry) -> str:
    lines = [f"{entry.id} ({entry.kind}): {entry.what}", f"status: {entry.status}"]
    if entry.status == "not here":
        lines.append(f"why: {entry.why}")
    else:
        est = minutes(cat, entry)
        lines.append(f"sweep: {where(entry)}; view: {entry.view}; about {est:.0f} min here")
        lines.append(f"differs from the study: {entry.differs or 'nothing beyond quicbed itself'}")
        for v in entry.compare:
            unit = f" {v.unit}" if v.unit else ""
            lines.append(
                f"compares: {v.what}: the study's {v.study:g}{unit} ({v.source}); agrees if "
                f"quicbed's is {v.rule.describe(v.unit)}"
            )
    return "\n".join(lines)


@options("tb", SweepTestbedOptions)
def reproduce_cmd(
    *,
    what: Annotated[
        str | None,
        typer.Argument(
            help="A figure or table (long-look-2024/fig4.7c) or a whole study "
            "(long-look-2024); with --list, the study to list."
        ),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the catalog with each entry's status.")
    ] = False,
    out_dir: Annotated[
        str | None, typer.Option("--out", help="Results folder (without it: describe).")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run.")] = False,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="With --resume: measure failed cells again.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Resume despite a changed spec or software.")] = False,
    yes: YesOpt = False,
    max_hours: MaxHoursOpt = MAX_HOURS,
    tb: SweepTestbedOptions,
    keep_testbed: KeepOpt = False,
    traces: TracesOpt = None,
    shard: Annotated[
        str | None, typer.Option("--shard", help="Run only shard i of K (i/K).")
    ] = None,
) -> None:
    """Regenerate a figure or table of the studies quicbed comes from, by its name.

    The catalog (sweeps/catalog/catalog.yaml, docs/reproduce.md) names every numbered
    figure and table of the five studies with its status: local (runs here), testbed
    (needs Emulab or CloudLab nodes) or not here, with the reason. --list prints it,
    with each entry's preset, view and estimated time on this machine.

    reproduce ID --out DIR runs exactly that figure's cells (the preset's own cells,
    so a full preset run shares them) and builds its report; it resumes, shards and
    stops like quicbed run. reproduce STUDY --out DIR runs every local entry of a
    study, one folder per preset under DIR, and writes DIR/index.html linking each
    entry to its report. Without --out: what the entry is and what it would run.
    """
    cat = load_catalog()
    if list_:
        _print_list(cat, cat.find(what) if what else cat.entries)
        return
    if what is None:
        raise QuicbedError("reproduce: name a figure, table or study, or pass --list")
    entries = cat.find(what)
    if out_dir is None:
        for e in entries:
            out.print(describe(cat, e), soft_wrap=True)
        return
    run = SweepRun(
        again=f"quicbed reproduce {what} --out {out_dir} --resume",
        tb=tb,
        resume=resume,
        retry_failed=retry_failed,
        force=force,
        yes=yes,
        max_hours=max_hours,
        keep_testbed=keep_testbed,
        traces=traces,
        shard=shard,
    )
    _reproduce(cat, what, entries, out_dir, run)


def register(app: typer.Typer) -> None:
    """Add ``reproduce`` to the quicbed CLI."""
    app.command("reproduce")(reproduce_cmd)


def _print_list(cat: Catalog, entries: list[Entry]) -> None:
    """--list: a line per entry (its status, sweep, view, time here), then the counts."""
    for e in entries:
        est = minutes(cat, e)
        t = f"~{est:.0f} min" if est is not None else "-"
        n = f"{len(e.compare)} study values" if e.status == "local" else "-"
        out.print(f"{e.id}\t{e.status}\t{where(e)}\t{e.view or '-'}\t{t}\t{n}", soft_wrap=True)
    counts = {s: sum(e.status == s for e in entries) for s in ("local", "testbed", "not here")}
    out.print(", ".join(f"{n} {s}" for s, n in counts.items()))


def _runnable(what: str, entries: list[Entry]) -> list[Entry]:
    """The entries of ``what`` that run here; one entry that does not is refused with
    its reason, a study none of whose entries runs here as such."""
    if len(entries) == 1 and entries[0].status != "local":
        e = entries[0]
        raise QuicbedError(f"reproduce {e.id}: {e.status}: {e.why or 'needs --hosts'}")
    runnable = [e for e in entries if e.status == "local"]
    if not runnable:
        raise QuicbedError(f"reproduce {what}: none of its entries runs here")
    return runnable


def _reproduce(cat: Catalog, what: str, entries: list[Entry], out_dir: str, run: SweepRun) -> None:
    """Run the entries of ``what`` that run here, a sweep per preset: one figure into
    ``out_dir`` itself, a study's presets each into a folder of its own."""
    by_preset: dict[str, list[Entry]] = {}
    for e in _runnable(what, entries):
        by_preset.setdefault(str(e.preset), []).append(e)
    if len(by_preset) == 1:  # one figure (or its panels): one folder, one report
        (group,) = by_preset.values()
        _reproduce_preset(cat, group, out_dir, run)
    else:
        _reproduce_study(cat, what, entries, by_preset, Path(out_dir), run)


def _reproduce_preset(cat: Catalog, group: list[Entry], out_dir: str, run: SweepRun) -> None:
    """Entries of one preset (a figure, or its panels): one sweep into ``out_dir``, one
    report; then what each entry is."""
    report = _sweep_and_report(cat, group, out_dir, run)
    for e in group:
        out.print(describe(cat, e), soft_wrap=True)
    _compare(group, report)
    out.print(f"report: {report / 'index.html'}")


def _compare(group: list[Entry], report: Path) -> None:
    """The entries' study values beside quicbed's, printed and in report/compare.csv."""
    from quicbed.report import studyvalues  # lazy: with the report

    verdicts = [v for e in group for v in studyvalues.judge(e, report)]
    path = studyvalues.write(report, verdicts)
    if path is not None:
        out.print(studyvalues.markdown(verdicts), soft_wrap=True)
        out.print(f"study values: {path}")


def _reproduce_study(
    cat: Catalog,
    what: str,
    entries: list[Entry],
    by_preset: dict[str, list[Entry]],
    root: Path,
    run: SweepRun,
) -> None:
    """A study's local entries: a sweep and a report per preset, each in its own folder
    under ``root``, and root/index.html linking every entry to the report that draws it."""
    folders: dict[str, Path] = {}
    for preset, group in by_preset.items():
        folder = root / Path(preset).stem
        out.print(f"{preset}: {len(group)} entries into {folder}")
        report = _sweep_and_report(cat, group, str(folder), run)
        _compare(group, report)
        for e in group:
            folders[e.id] = folder
    index = write_index(root, what, entries, folders)
    out.print(f"report: {index}")


def _sweep_and_report(cat: Catalog, group: list[Entry], out_dir: str, run: SweepRun) -> Path:
    """The entries of one preset measured in one sweep into ``out_dir`` (a cell two
    entries share, once), and its report built there; the report's folder."""
    from quicbed.report.build import build  # lazy: matplotlib and scipy, ~0.9 s

    run_spec(entries_spec(cat, group), out_dir, run)
    return build(Path(out_dir)).out


def write_index(root: Path, what: str, entries: list[Entry], folders: dict[str, Path]) -> Path:
    """DIR/index.html: every entry of the study, linked to the report that draws it,
    with what quicbed's run differs in, or why it does not run here."""
    rows = []
    for e in entries:
        if e.id in folders:
            rel = folders[e.id].relative_to(root) / "report" / "index.html"
            where_ = f'<a href="{html.escape(str(rel))}">{html.escape(str(e.preset))}</a>'
            note = e.differs or ""
        else:
            where_, note = html.escape(e.status), e.why or ""
        rows.append(
            f"<tr><td>{html.escape(e.id)}</td><td>{html.escape(e.what)}</td>"
            f"<td>{where_}</td><td>{html.escape(e.view or '')}</td>"
            f"<td>{html.escape(note)}</td></tr>"
        )
    page = (
        f"<!doctype html><meta charset='utf-8'><title>quicbed reproduce {html.escape(what)}"
        "</title><style>body{font-family:sans-serif}td{vertical-align:top;padding:4px;"
        "border-bottom:1px solid #ddd}</style>"
        f"<h1>{html.escape(what)}: the studies' figures and tables</h1><table>"
        "<tr><th>entry</th><th>what</th><th>report</th><th>view</th>"
        "<th>differs from the study / why not here</th></tr>" + "".join(rows) + "</table>"
    )
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.html"
    index.write_text(page)
    return index
