"""``quicbed reproduce``: a study's figure or table, or all a study's local ones, by name.

Not registered by itself: quicbed/cli/main.py adds it with ``reproduce_cli.register(app,
run_spec)``, handing over the one way a sweep spec is run (``quicbed run``'s).
"""

from __future__ import annotations

import html
from collections.abc import Callable
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
from quicbed.errors import QuicbedError
from quicbed.run.console import out
from quicbed.spec.catalog import Catalog, Entry, entries_spec, entry_spec, load_catalog

#: what one catalog line shows of an entry that does not run here
_WHY_WIDTH = 90


def minutes(cat: Catalog, entry: Entry) -> float | None:
    """The entry's sweep's pessimistic wall time here (the estimate ``run`` prints)."""
    if entry.status == "not here":
        return None
    from quicbed.run.sweep import estimate
    from quicbed.spec.sweepspec import plan

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
    return "\n".join(lines)


def register(app: typer.Typer, run_spec: Callable[..., None]) -> None:
    @app.command("reproduce")
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
        force: Annotated[
            bool, typer.Option(help="Resume despite a changed spec or software.")
        ] = False,
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
            entries = cat.find(what) if what else cat.entries
            for e in entries:
                est = minutes(cat, e)
                t = f"~{est:.0f} min" if est is not None else "-"
                out.print(f"{e.id}\t{e.status}\t{where(e)}\t{e.view or '-'}\t{t}", soft_wrap=True)
            counts = {
                s: sum(e.status == s for e in entries) for s in ("local", "testbed", "not here")
            }
            out.print(", ".join(f"{n} {s}" for s, n in counts.items()))
            return
        if what is None:
            raise QuicbedError("reproduce: name a figure, table or study, or pass --list")
        entries = cat.find(what)
        one = len(entries) == 1
        if out_dir is None:
            for e in entries:
                out.print(describe(cat, e), soft_wrap=True)
            return
        if one and entries[0].status != "local":
            e = entries[0]
            raise QuicbedError(f"reproduce {e.id}: {e.status}: {e.why or 'needs --hosts'}")
        runnable = [e for e in entries if e.status == "local"]
        if not runnable:
            raise QuicbedError(f"reproduce {what}: none of its entries runs here")
        common = dict(
            resume=resume,
            retry_failed=retry_failed,
            force=force,
            yes=yes,
            max_hours=max_hours,
            tb=tb,
            keep_testbed=keep_testbed,
            traces=traces,
            shard=shard,
        )
        again = f"quicbed reproduce {what} --out {out_dir} --resume"
        from quicbed.report.build import build

        by_preset: dict[str, list[Entry]] = {}
        for e in runnable:
            by_preset.setdefault(str(e.preset), []).append(e)
        if len(by_preset) == 1:  # one figure (or its panels): one folder, one report
            (group,) = by_preset.values()
            run_spec(entries_spec(cat, group), out_dir, again=again, **common)
            r = build(Path(out_dir))
            for e in group:
                out.print(describe(cat, e), soft_wrap=True)
            out.print(f"report: {r.out / 'index.html'}")
            return
        folders: dict[str, Path] = {}
        for preset, group in by_preset.items():
            folder = Path(out_dir) / Path(preset).stem
            out.print(f"{preset}: {len(group)} entries into {folder}")
            run_spec(entries_spec(cat, group), str(folder), again=again, **common)
            build(folder)
            for e in group:
                folders[e.id] = folder
        index = write_index(Path(out_dir), what, entries, folders)
        out.print(f"report: {index}")


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
