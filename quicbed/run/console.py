"""What the ``quicbed`` commands print: tables, JSON, progress bars, summaries.

Kept apart from the command line so that a command reads as what it does (parse,
validate, run) and the look of its output is changed in one place. Rich markup goes
to the terminal through ``out``; machine-readable output (JSON, paths that must not
be wrapped at the terminal width) is plain ``print``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from quicbed.backends import get_backend
from quicbed.progress import progress_bar
from quicbed.spec.arms import unpinned_aead, unpinned_arms
from quicbed.testbed.owner import describe

if TYPE_CHECKING:  # scipy loads with the analysis: when a transfer is printed, not at start
    from quicbed.analysis.transfers import BulkSummary, CompeteSummary

out = Console()


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def progress(*, transient: bool = False) -> Progress:
    """The progress bar of a long command, on stderr so stdout stays the result."""
    return progress_bar(Console(stderr=True), transient=transient)


def note(text: str) -> None:
    """A plain ``quicbed: ...`` line on stderr (not an error)."""
    print(f"quicbed: {text}", file=sys.stderr)


def warn(text: str) -> None:
    out.print(f"[yellow]warning:[/] {text}")


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


# --- testbed --------------------------------------------------------------------------
def print_testbed_status(info: dict[str, Any], kind: str, name: str) -> None:
    """``testbed status`` for people: the owner, then each role's state."""
    if info["owner"]:
        out.print(f"in use by {describe(info['owner'])}")
    for line in get_backend(kind).status_lines(info, name):  # each kind's own fields
        out.print(line)
    k = info.get("kept_link")
    if k:
        out.print(
            f"keeps a link of {k['link']} (quicbed link up): receipt of {k['receipt_created']}, "
            f"{k['age_s']} s old"
            + ("" if k["holds"] else "; its shaping changed since: the next command drops it")
        )


# --- link -----------------------------------------------------------------------------
def print_receipt(receipt: Any) -> None:
    """A fidelity receipt as a table of checks, then the verdict."""
    t = Table(title=f"Fidelity receipt: {receipt.label} ({receipt.shaper['shaper']})")
    for col in ("check", "expected", "measured", "accepted", "verdict"):
        t.add_column(col, no_wrap=True)
    t.add_column("note", overflow="fold")

    def f(v: float | None) -> str:
        return _num(v, ".4g")

    for c in receipt.checks:
        verdict = {True: "[green]pass[/]", False: "[red]FAIL[/]", None: "[yellow]n/j[/]"}[c.passed]
        acc = f"{f(c.low)}..{f(c.high)}" if c.low is not None or c.high is not None else "-"
        note = c.note if c.passed is not True else ""
        t.add_row(
            c.name, f"{f(c.expected)} {c.unit}", f"{f(c.measured)} {c.unit}", acc, verdict, note
        )
    out.print(t)
    if receipt.emulator and "cpu_pct_during_tcp_max" in receipt.emulator:
        out.print(
            f"emulator CPU during TCP: {receipt.emulator['cpu_pct_during_tcp_max']:.0f} % of a core"
        )
    if receipt.host_cpu:
        h = receipt.host_cpu
        out.print(
            f"host CPU over the receipt: {h['busy_pct']:.0f} % busy, "
            f"{h['steal_pct']:.1f} % stolen by the hypervisor"
        )
    out.print("[green]within tolerance[/]" if receipt.passed else "[red]OUT OF TOLERANCE[/]")


# --- cell -----------------------------------------------------------------------------
def print_cell(result: Any, cfg: Any) -> None:
    """A measured cell: per arm n, mean, sd, median, CI; each comparison; verification."""
    _print_cell_heading(result, cfg)
    if result.status != "done":
        out.print(f"[red]failed:[/] {result.problem}")
        return
    if cfg.kind != "page":  # a bulk or compete cell: its flows' numbers, not PLTs
        _print_stored_transfer(result)
        return
    _print_plt_table(result.comparisons)
    _print_comparisons(result.comparisons)
    _print_load_checks(result, cfg)


def _print_cell_heading(result: Any, cfg: Any) -> None:
    """Which cell, attempt and results folder, its arms and the browsers they loaded in:
    printed first, also for a failed attempt, so its failure is read against them."""
    how = cfg.mode if cfg.kind == "page" else cfg.kind  # a transfer has no 0-RTT mode
    out.print(
        f"cell {result.cell_id} attempt {result.attempt}: {cfg.page}, "
        f"{cfg.condition.label()}, {how}, results in {result.out}"
    )
    out.print("arms: " + "; ".join(a.describe() for a in cfg.resolved_arms()))
    by_browser: dict[str, list[str]] = {}
    for a in cfg.resolved_arms():
        if a.browser:
            seen = result.browsers.get(a.name)
            key = f"{a.browser} ({seen})" if seen else a.browser
            by_browser.setdefault(key, []).append(a.name)
    if by_browser:
        out.print("browser: " + "; ".join(f"{', '.join(v)} in {k}" for k, v in by_browser.items()))
    if cfg.kind == "page" and cfg.background:
        out.print(
            "background, through every load: "
            + "; ".join(f"bg{i + 1} {f.label()}" for i, f in enumerate(cfg.background))
        )


def _print_stored_transfer(result: Any) -> None:
    """A transfer cell's flows as ``quicbed bulk`` prints them, read back from the store
    (a CellResult holds a page cell's comparisons only)."""
    from quicbed.analysis.transfers import stored_transfer  # not at the top: scipy
    from quicbed.results.store import Store  # loads in 0.6 s of every command's start

    store = Store.open_readonly(result.out)
    try:
        print_transfer(stored_transfer(store, result.cell_id, result.attempt))
    finally:
        store.close()


def _print_plt_table(comparisons: dict[str, Any]) -> None:
    """Each arm's page load times once, though an arm may be in several comparisons."""

    def f(v: float | None) -> str:
        return _num(v, ".1f")

    t = Table()
    for col in ("arm", "valid n", "mean ms", "sd ms", "median ms", "95 % CI"):
        t.add_column(col)
    shown: set[str] = set()
    for c in comparisons.values():
        for s in (c.reference, c.candidate):
            if s.arm not in shown:
                shown.add(s.arm)
                t.add_row(
                    s.arm,
                    str(s.n),
                    f(s.mean),
                    f(s.sd),
                    f(s.median),
                    f"{f(s.ci95_low)}..{f(s.ci95_high)}",
                )
    if shown:
        out.print(t)


def _print_comparisons(comparisons: dict[str, Any]) -> None:
    """Per pair, the difference, which arm was faster and whether it is significant, or
    why there is no comparison; then the pair's warnings."""
    for name, c in comparisons.items():
        ref, cand = name.split("/")
        if not c.enough:
            out.print(f"[yellow]{name}: no comparison:[/] {c.problem}")
        else:
            sig = "significant" if c.significant else "not significant"
            faster = f"{cand} faster" if (c.pct_diff or 0) > 0 else f"{ref} faster"
            out.print(
                f"{name}: difference ({ref} - {cand}) / {cand} = {c.pct_diff:+.1f} % "
                f"({faster}); Welch p = {c.welch_p:.3g}, {sig} at {c.alpha:g}"
            )
        for w in c.warnings:
            warn(w)


def _print_load_checks(result: Any, cfg: Any) -> None:
    """What the checks of the loads found, per arm in the cell's order, so the claim
    (h3 with 0-RTT, h2 with TLS resumption) is read off the evidence; then the invalid
    and spoiled loads, and the wait for a quiet host."""
    arms = sorted(result.verified.items(), key=lambda kv: list(cfg.arms).index(kv[0]))
    for arm, v in arms:
        groups = f", key exchange {','.join(v['groups'])}" if v.get("groups") else ""
        out.print(
            f"{arm}: {v['valid']}/{v['measured']} loads verified, protocols "
            f"{','.join(v['protocols']) or '-'}, 0-RTT used {v['used_0rtt']}, "
            f"TLS resumed {v['tls_resumed']}, CC {','.join(v['cc']) or '-'}{groups}"
            + (
                f", background {100 * v['background_share']:.0f} % of the downlink"
                if "background_share" in v
                else ""
            )
            + (
                f", background uploads {100 * v['background_share_up']:.0f} % of the uplink"
                if "background_share_up" in v
                else ""
            )
        )
    counted = {arm: v for arm, v in arms if v.get("chains_counted")}
    if counted:
        out.print(
            f"certificate {cfg.certificate}: every chain counted from the wire on "
            + ", ".join(f"{arm} {v['chains_counted']} loads" for arm, v in counted.items())
        )
    for arm, v in counted.items():
        if v["chain_problems"]:
            warn(
                f"{arm}: {v['chain_problems']} loads carried a chain that is not the "
                f"cell's {cfg.certificate} (their handshake's chain_problems)"
            )
    for arm, why in unpinned_arms(cfg.resolved_arms(), cfg.key_exchange).items():
        warn(f"{arm} runs its own key exchange, not the cell's {cfg.key_exchange}: {why}")
    for arm, why in unpinned_aead(cfg.resolved_arms(), cfg.aead).items():
        warn(f"{arm} runs its own cipher suite, not the cell's aead {cfg.aead}: {why}")
    ran = {arm: v["groups"] for arm, v in arms if v.get("groups")}
    if len({tuple(g) for g in ran.values()}) > 1:
        warn(
            "the arms ran different key exchanges (their ServerHellos): "
            + ", ".join(f"{arm} {','.join(g)}" for arm, g in ran.items())
            + "; the comparison includes the handshakes' difference"
        )
    for arm, reasons in result.invalid.items():
        out.print(f"[yellow]{len(reasons)} invalid {arm} load(s):[/] {reasons[0]}")
    for arm, reasons in result.spoiled.items():
        n = result.verified.get(arm, {}).get("replacements", 0)
        out.print(
            f"[yellow]{len(reasons)} {arm} load(s) spoiled by the link or host, "
            f"{n} replaced:[/] {reasons[0]}"
        )
    if result.waited_s >= 0.5:
        out.print(f"waited {result.waited_s:.0f} s for a quiet host")


def print_transfer(r: BulkSummary | CompeteSummary) -> None:
    """A bulk cell's goodput per arm, or a compete cell's shares and Jain's index."""
    from quicbed.results.transfers import BulkResult

    if isinstance(r, BulkResult):
        for name, a in r.summary.items():
            gp = "-" if a.goodput_mbit_mean is None else f"{a.goodput_mbit_mean:.2f} Mbit/s"
            ideal = "" if a.of_ideal is None else f" ({a.of_ideal * 100:.1f} % of ideal)"
            rt = "n/a" if a.retransmissions_mean is None else f"{a.retransmissions_mean:.0f}"
            ack = "" if a.ack_ratio_mean is None else f", ACK ratio {a.ack_ratio_mean:.3f}"
            rcv = a.udp_rcvbuf_errors.get("client")
            udp = "" if not rcv else f", client UDP receive-buffer drops {rcv}"
            out.print(f"{name}: n {a.n}, goodput {gp}{ideal}, retransmissions {rt}{ack}{udp}")
    else:
        for g in r.summary.values():
            share = "-" if g.share_mean is None else f"{g.share_mean * 100:.1f} %"
            per_flow = "-" if g.per_flow_mbit_mean is None else f"{g.per_flow_mbit_mean:.2f} Mbit/s"
            out.print(
                f"{g.arm} x{g.n_flows}: share {share} (fair {g.fair_share * 100:.0f} %), "
                f"{per_flow} per flow, over {g.n} repetitions"
            )
        jain = "n/a" if r.jain_mean is None else f"{r.jain_mean:.3f}"
        out.print(f"Jain's index {jain} (mean over repetitions)")
    print_cpu(r.cpu_items(), "flow" if r.kind == "bulk" else "repetition")
    for name, metrics in r.comparisons.items():
        for metric, c in metrics.items():
            if not c.enough:
                out.print(f"[yellow]{name} ({metric}): no comparison:[/] {c.problem}")
            else:
                out.print(f"{name} ({metric}): {c.pct_diff:+.1f} %, {c.test} p = {c.p:.3g}")


def print_cpu(items: dict[str, list[Any]], per: str) -> None:
    """Per arm, each role's mean CPU time per load or flow and per MB it carried."""
    from quicbed.analysis.cpusummary import summary  # scipy's start-up cost, as above

    for arm, got in items.items():
        if not got:
            continue
        parts = []
        for role, s in summary(got).items():
            if not s["n"]:
                parts.append(f"{role} -")
                continue
            mb = "" if s["ms_per_mb"] is None else f", {s['ms_per_mb']:.2f} ms/MB"
            share = s["user_share"]
            ticks = "no ticks" if share is None else f"ticks {share:.0%} user"
            parts.append(f"{role} {s['total_ms']:.0f} ms ({ticks}{mb})")
        how = "run time; user share of the tick samples"
        out.print(f"{arm}: CPU per {per} ({how}): {'; '.join(parts)}")


# --- sweeps ---------------------------------------------------------------------------
def print_sweep_result(result: Any, what: str, name: str, folder: str) -> None:
    stopped = f", {result.stopped} not started (stop requested)" if result.stopped else ""
    kept_failed = f" ({result.kept_failed} of them failed)" if result.kept_failed else ""
    waited = f"; waited {result.waited_s:.0f} s for a quiet host" if result.waited_s >= 0.5 else ""
    out.print(
        f"{what} {name!r}: {result.done} cells measured, {result.skipped} kept from "
        f"before{kept_failed}; {result.failed + result.kept_failed} failed now{stopped}"
        f"{waited}; results in {folder}"
    )
    for r in result.results:
        if r.status != "done":
            out.print(f"[red]cell {r.cell_id} failed:[/] {r.problem}")
    out.print(f"next: quicbed report {folder}")


def print_package(r: Any) -> None:
    """A written replication package: what it holds and its checksum (plain: paths)."""
    c = r.counts
    more = f", {c['traces']} trace files ({c['keys']} TLS key logs)" if "traces" in c else ""
    more += f", {c['frames']} frames" if c.get("frames") else ""
    print(
        f"wrote {r.path}: {r.size / 1024:.0f} KiB, {r.files} files ({c['cells']} cells, "
        f"{c['runs']} loads, {c['hars']} HARs, {c['logs']} logs{more})"
    )
    print(f"SHA-256 {r.sha256} (publish it with the paper)")
    for n in r.notes:
        print(f"note: {n}")
    print(f"next: quicbed verify {r.path}")
