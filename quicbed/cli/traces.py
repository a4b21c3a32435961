"""``quicbed traces``: the trace store of time-varying links (quicbed.model.capacity).

A sub-app: quicbed/cli/main.py adds it. Traces are Mahimahi files, one per direction;
generated ones (``gen:MODEL:seed=N``) are made from a stated model on first use, so a
preset names them without shipping files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quicbed.model import capacity, tracegen
from quicbed.run.console import out, print_json

app = typer.Typer(
    no_args_is_help=True,
    help="Traces for time-varying links: import Mahimahi files, generate, list, show.",
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _facts(t: capacity.Trace) -> dict[str, object]:
    return {
        "name": t.name,
        "sha256": t.sha256,
        "made": t.made,
        **{
            d: {
                "opportunities": len(t.offsets(d)),
                "period_s": t.offsets(d)[-1] / 1000,
                "mean_mbit": round(t.mean_mbit(d), 3),
                "peak_100ms_mbit": round(capacity.peak_mbit(t.offsets(d)), 3),
            }
            for d in capacity.DIRECTIONS
        },
    }


@app.command("list")
def list_traces(json_out: JsonOpt = False) -> None:
    """The traces in the store (QUICBED_TRACES, else traces/ in the project)."""
    traces = capacity.stored()
    if json_out:
        print_json([_facts(t) for t in traces])
        return
    if not traces:
        out.print(
            f"no trace in {capacity.store()} (quicbed traces import, or name gen:MODEL:seed=N)"
        )
    for t in traces:
        out.print(t.describe())


@app.command("models")
def models() -> None:
    """The models a generated trace (gen:MODEL[:seed=N][:seconds=S]) can come from."""
    for name in tracegen.MODELS:
        out.print(tracegen.describe(name) + "\n")


@app.command("import")
def import_trace(
    name: Annotated[str, typer.Argument(help="The trace's name in the store.")],
    down: Annotated[Path, typer.Option("--down", help="Downlink Mahimahi file.")],
    up: Annotated[
        Path | None, typer.Option("--up", help="Uplink Mahimahi file (default: --down's).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a stored trace of other content.")
    ] = False,
) -> None:
    """Store Mahimahi trace files (one millisecond offset per line, one 1500-byte
    packet per line) as a named trace."""
    t = capacity.import_files(name, down, up, force=force)
    out.print(f"stored {t.describe()}, digest {t.sha256[:12]}")


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="A stored trace, or gen:MODEL:seed=N.")],
    json_out: JsonOpt = False,
) -> None:
    """A trace's rates, period and digest (a generated one is made if needed)."""
    t = capacity.load(name)
    if json_out:
        print_json(_facts(t))
        return
    f = _facts(t)
    out.print(t.describe())
    for d in capacity.DIRECTIONS:
        out.print(f"  {d}: {f[d]}")
    out.print(f"  digest {t.sha256}")
