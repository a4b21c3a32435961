"""``quicbed bulk`` and ``quicbed compete``: the one-shot commands of quicbed.bulk.

Not registered by itself: quicbed/cli.py adds them with ``bulk_cli.register(app)``
(two top-level commands), so the CLI's owner decides where they appear.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quicbed.cli_options import LinkOptions, TestbedOptions, options

OutOpt = Annotated[Path, typer.Option("--out", help="Results folder (a store, as a cell's); "
                                      "its report is built there.")]  # fmt: skip
ArmsOpt = Annotated[str, typer.Option(help="Arms, comma-separated, with settings as for "
                                      "cell --arms (h2:tcp_sack=false,h3).")]  # fmt: skip
ForceOpt = Annotated[bool, typer.Option(help="Add to a folder measured with other software.")]
ShaperOpt = Annotated[str, typer.Option(help="Link shaper: auto, userspace, netem, dummynet.")]
TcpSecondsOpt = Annotated[float, typer.Option(help="iperf3 TCP seconds of the receipt.")]
SizeOpt = Annotated[str, typer.Option(help="Bulk object size: 10MB, 100MB, 1GB (decimal).")]
CcOpt = Annotated[str, typer.Option(help="Congestion control of every arm.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the record as JSON.")]


def _progress(what: str, done: int, total: int) -> None:
    typer.echo(f"{what} ({done}/{total})")


def _report(out: Path) -> None:
    from quicbed import report

    rep = report.build(out)
    typer.echo(f"report: {rep.out / 'index.html'} (numbers: {rep.out / 'transfers.csv'})")


@options("link", LinkOptions)
@options("tb", TestbedOptions)
def bulk(
    *,
    link: LinkOptions,
    tb: TestbedOptions,
    out: OutOpt,
    arms: ArmsOpt = "h2,h3",
    reps: Annotated[int, typer.Option(help="Downloads per arm.")] = 5,
    size: SizeOpt = "100MB",
    duration: Annotated[
        float | None, typer.Option(help="Seconds per download (the object repeated).")
    ] = None,
    cc: CcOpt = "cubic",
    shaper: ShaperOpt = "auto",
    tcp_seconds: TcpSecondsOpt = 10.0,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Bulk goodput per arm: N downloads each, one flow at a time, on a proven link (a
    bulk cell, stored and reported as a sweep's)."""
    from quicbed.bulk import run_bulk
    from quicbed.console import print_json

    bed = tb.open("quicbed bulk")
    try:
        r = run_bulk(link.condition(), out, arms=arms.split(","), reps=reps, size=size,
                     duration_s=duration, cc=cc, testbed=bed, shaper=shaper,
                     receipt_tcp_seconds=tcp_seconds, progress=_progress, force=force)  # fmt: skip
    finally:
        bed.close()
    if as_json:
        print_json(r.model_dump(mode="json"))
        return
    for name, s in r.summary.items():
        gp = "-" if s.goodput_mbit_mean is None else f"{s.goodput_mbit_mean:.2f} Mbit/s"
        ideal = "" if s.of_ideal is None else f" ({s.of_ideal * 100:.1f} % of ideal)"
        rt = "n/a" if s.retransmissions_mean is None else f"{s.retransmissions_mean:.0f}"
        typer.echo(f"{name}: n {s.n}, goodput {gp}{ideal}, retransmissions {rt}")
    _report(out)


@options("link", LinkOptions)
@options("tb", TestbedOptions)
def compete(
    *,
    link: LinkOptions,
    tb: TestbedOptions,
    out: OutOpt,
    flows: Annotated[str, typer.Option(help="Flows per arm, e.g. h3x1,h2x4.")] = "h3x1,h2x1",
    reps: Annotated[int, typer.Option(help="Repetitions (all flows each time).")] = 3,
    duration: Annotated[float, typer.Option(help="Seconds each flow runs.")] = 30.0,
    stagger: Annotated[float, typer.Option(help="Seconds between flow starts.")] = 0.0,
    size: SizeOpt = "100MB",
    cc: CcOpt = "cubic",
    shaper: ShaperOpt = "auto",
    tcp_seconds: TcpSecondsOpt = 10.0,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """K flows of one arm against M of another on one bottleneck: shares, Jain's index (a
    compete cell, stored and reported as a sweep's)."""
    from quicbed.bulk import run_compete
    from quicbed.cellconfig import parse_flows
    from quicbed.console import print_json

    bed = tb.open("quicbed compete")
    try:
        r = run_compete(link.condition(), out, groups=list(parse_flows(flows)), reps=reps,
                        duration_s=duration, stagger_s=stagger, size=size, cc=cc, testbed=bed,
                        shaper=shaper, receipt_tcp_seconds=tcp_seconds, progress=_progress,
                        force=force)  # fmt: skip
    finally:
        bed.close()
    if as_json:
        print_json(r.model_dump(mode="json"))
        return
    for a in r.summary.values():
        share = "-" if a.share_mean is None else f"{a.share_mean * 100:.1f} %"
        per_flow = "-" if a.per_flow_mbit_mean is None else f"{a.per_flow_mbit_mean:.2f} Mbit/s"
        typer.echo(f"{a.arm} x{a.n_flows}: share {share} (fair {a.fair_share * 100:.0f} %), "
                   f"{per_flow} per flow, over {a.n} repetitions")  # fmt: skip
    jain = "n/a" if r.jain_mean is None else f"{r.jain_mean:.3f}"
    typer.echo(f"Jain's index {jain} (mean over repetitions)")
    _report(out)


def register(app: typer.Typer) -> None:
    """Add ``bulk`` and ``compete`` to the quicbed CLI."""
    app.command("bulk")(bulk)
    app.command("compete")(compete)
