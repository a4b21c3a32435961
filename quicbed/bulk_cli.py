"""``quicbed bulk`` and ``quicbed compete``: the one-shot commands of quicbed.bulk.

Not registered by itself: quicbed/cli.py adds them with ``bulk_cli.register(app)``
(two top-level commands), so the CLI's owner decides where they appear.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from quicbed.cli_options import LinkOptions, TestbedOptions, options
from quicbed.errors import QuicbedError

OutOpt = Annotated[Path, typer.Option("--out", help="Folder for the JSON record and figures.")]
ShaperOpt = Annotated[str, typer.Option(help="Link shaper: auto, userspace, netem, dummynet.")]
TcpSecondsOpt = Annotated[float, typer.Option(help="iperf3 TCP seconds of the receipt.")]
SizeOpt = Annotated[str, typer.Option(help="Bulk object size: 10MB, 100MB, 1GB (decimal).")]
CcOpt = Annotated[str, typer.Option(help="Congestion control of every arm.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the record as JSON.")]


def _groups(text: str) -> list[tuple[str, int]]:
    """``h3x1,h2x4`` (or ``h3,h2``: one flow each) as [(arm, flows)]."""
    out = []
    for part in text.split(","):
        arm, _, n = part.strip().partition("x")
        try:
            out.append((arm, int(n) if n else 1))
        except ValueError:
            raise QuicbedError(f"--flows: {part!r} is not ARMxN (e.g. h3x1,h2x4)") from None
    return out


@options("link", LinkOptions)
@options("tb", TestbedOptions)
def bulk(
    *,
    link: LinkOptions,
    tb: TestbedOptions,
    out: OutOpt,
    arms: Annotated[str, typer.Option(help="Arms, comma-separated.")] = "h2,h3",
    reps: Annotated[int, typer.Option(help="Downloads per arm.")] = 5,
    size: SizeOpt = "100MB",
    duration: Annotated[
        float | None, typer.Option(help="Seconds per download (the object repeated).")
    ] = None,
    cc: CcOpt = "cubic",
    shaper: ShaperOpt = "auto",
    tcp_seconds: TcpSecondsOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """Bulk goodput per arm: N downloads each, one flow at a time, on a proven link."""
    from quicbed.bulk import run_bulk
    from quicbed.console import print_json

    bed = tb.open("quicbed bulk")
    try:
        r = run_bulk(link.condition(), out, arms=arms.split(","), reps=reps, size=size,
                     duration_s=duration, cc=cc, testbed=bed, shaper=shaper,
                     receipt_tcp_seconds=tcp_seconds, progress=typer.echo)  # fmt: skip
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
    typer.echo(f"record: {out / 'bulk.json'}")


@options("link", LinkOptions)
@options("tb", TestbedOptions)
def compete(
    *,
    link: LinkOptions,
    tb: TestbedOptions,
    out: OutOpt,
    flows: Annotated[str, typer.Option(help="Flows per arm, e.g. h3x1,h2x4.")] = "h3x1,h2x1",
    duration: Annotated[float, typer.Option(help="Seconds each flow runs.")] = 30.0,
    stagger: Annotated[float, typer.Option(help="Seconds between flow starts.")] = 0.0,
    size: SizeOpt = "100MB",
    cc: CcOpt = "cubic",
    shaper: ShaperOpt = "auto",
    tcp_seconds: TcpSecondsOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """K flows of one arm against M of another on one bottleneck: shares, Jain's index."""
    from quicbed.bulk import run_compete
    from quicbed.console import print_json

    bed = tb.open("quicbed compete")
    try:
        r = run_compete(link.condition(), out, groups=_groups(flows), duration_s=duration,
                        stagger_s=stagger, size=size, cc=cc, testbed=bed, shaper=shaper,
                        receipt_tcp_seconds=tcp_seconds, progress=typer.echo)  # fmt: skip
    finally:
        bed.close()
    if as_json:
        print_json(r.model_dump(mode="json"))
        return
    for f in r.flows:
        share = r.shares.get(f.flow)
        typer.echo(f"{f.flow}: {r.steady_bps.get(f.flow, 0) / 1e6:.2f} Mbit/s steady"
                   + (f", share {share * 100:.1f} %" if share is not None else ""))  # fmt: skip
    jain = "n/a" if r.jain is None else f"{r.jain:.3f}"
    typer.echo(f"Jain's index {jain} over {r.steady_from_s:.1f}-{r.steady_to_s:.1f} s; "
               f"record: {out / 'compete.json'}")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add ``bulk`` and ``compete`` to the quicbed CLI."""
    app.command("bulk")(bulk)
    app.command("compete")(compete)
