"""``quicbed pages``: the page store's replay archives: HAR imports and page models.

A sub-app: quicbed/cli/main.py adds it with ``app.add_typer(pages_cli.app, ...)``. An
archive is only ever added whole and never written over without --force
(quicbed.replay.pagestore), so a page that cells have measured keeps its bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from quicbed.errors import QuicbedError
from quicbed.replay import corpus, harimport, models, pagestore
from quicbed.replay.archive import Archive, store
from quicbed.run.console import out, print_json

app = typer.Typer(
    no_args_is_help=True,
    help="Real pages to replay: import a HAR, build the page models, list and show archives.",
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store", help="Page store folder (default: $QUICBED_PAGES, else pages/ in the project)."
    ),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace an archive of the same name and other content.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _store(option: str | None) -> Path:
    path = Path(option) if option else store()
    if path.exists() and not path.is_dir():
        raise QuicbedError(f"--store: {path} is a file, not a folder")
    return path


def _source(a: Archive) -> str:
    s = a.source
    if s.get("kind") == "har":
        skipped = sum(int(v) for k, v in s.items() if k.startswith("skipped_") and v.isdigit())
        return f"har {s.get('file', '?')}" + (f" ({skipped} skipped)" if skipped else "")
    if s.get("kind") == "model":
        return f"model {s.get('model', '?')} (p{s.get('percentile', '?')} {s.get('client', '')})"
    return s.get("kind", "?")


def _summary(a: Archive) -> dict[str, Any]:
    return {
        "name": a.name,
        "main": a.main,
        "origins": len(a.origins),
        "entries": len(a.entries()),
        "bytes": a.total_bytes(),
        "source": dict(a.source),
        "digest": a.digest(),
    }


@app.command("import")
def import_cmd(
    *,
    har: Annotated[str, typer.Argument(help="A HAR 1.2 file saved with content.")],
    name: Annotated[
        str | None,
        typer.Option("--name", help="The archive's name (default: the file's name, without .har)."),
    ] = None,
    store_dir: StoreOpt = None,
    force: ForceOpt = False,
) -> None:
    """Import a browser's recording (HAR 1.2 with content) into a replay archive.

    Save it from Chrome's or Firefox's DevTools with "Save all as HAR with content",
    from a cold load (cache disabled). Each body is stored once, by its SHA-256; each
    origin keeps its recorded round trip and each entry its server time.

    Failed requests, data: URLs and repeats of a request are skipped and counted; what a
    replay cannot serve (an http:// resource, a 304, an entry without its body, more
    origins than the testbed has addresses) is refused by name. docs/replay.md,
    "Importing a HAR", states every rule.
    """
    path = Path(har)
    if not path.is_file():
        raise QuicbedError(
            f"HAR {har}: no such file" if not path.exists() else f"HAR {har}: not a file"
        )
    archive_name = harimport.check_name(name) if name else harimport.default_name(path)
    folder = _store(store_dir)
    archive, bodies = harimport.read_har(path, archive_name)
    state = pagestore.put(archive, bodies, folder, force=force)
    skipped = ", ".join(
        f"{k.removeprefix('skipped_')} {v}"
        for k, v in archive.source.items()
        if k.startswith("skipped_") and v != "0"
    )
    out.print(
        f"{archive.name}: {state}; {len(archive.origins)} origins, {len(archive.entries())} "
        f"entries, {archive.total_bytes()} bytes; skipped: {skipped or 'none'}; "
        f"{folder / archive.name}",
        highlight=False,
        soft_wrap=True,
    )


@app.command("build")
def build_cmd(
    *,
    model: Annotated[
        list[str] | None,
        typer.Argument(help="Models to build (default: all of workloads/replay-models.yaml)."),
    ] = None,
    store_dir: StoreOpt = None,
    force: ForceOpt = False,
) -> None:
    """Build the page models into archives: pages shaped by HTTP Archive's percentiles.

    Each model (workloads/replay-models.yaml; docs/replay.md, "The page models") is a
    real dependency tree over many origins, the same bytes on every machine: a second
    build changes nothing.
    """
    ms = models.load()
    names = models.check_models(list(model or []), ms)
    folder = _store(store_dir)
    for name in names:
        archive, bodies = corpus.build(name, ms)
        state = pagestore.put(archive, bodies, folder, force=force)
        out.print(
            f"{name}: {state}; {len(archive.origins)} origins, {len(archive.entries())} "
            f"entries, {archive.total_bytes()} bytes, digest {archive.digest()[:12]}",
            highlight=False,
            soft_wrap=True,
        )


@app.command("list")
def list_cmd(*, store_dir: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The archives in the page store: origins, entries, bytes, source and digest."""
    folder = _store(store_dir)
    rows: list[dict[str, Any]] = []
    sources: dict[str, str] = {}
    for name in pagestore.names(folder):
        try:
            a = pagestore.get(folder, name, check_bodies=False)
        except QuicbedError as exc:
            rows.append({"name": name, "error": str(exc)})
            continue
        rows.append(_summary(a))
        sources[name] = _source(a)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print(f"page store {folder}: no archives", highlight=False)
        return
    t = Table(title=f"page store {folder}")
    for col in ("name", "origins", "entries", "bytes", "source", "digest"):
        t.add_column(col, justify="right" if col in ("origins", "entries", "bytes") else "left")
    for r in rows:
        if "error" in r:
            t.add_row(r["name"], "", "", "", f"unreadable: {r['error']}", "")
        else:
            counts = (str(r["origins"]), str(r["entries"]), str(r["bytes"]))
            t.add_row(r["name"], *counts, sources[r["name"]], r["digest"][:12])
    out.print(t)


@app.command("show")
def show_cmd(
    *,
    name: Annotated[str, typer.Argument(help="An archive of the page store.")],
    store_dir: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One archive: its main document, then per origin its host, RTT, entries and bytes."""
    a = pagestore.get(_store(store_dir), name)
    per_origin: list[dict[str, Any]] = [
        {
            "origin": o.origin,
            "host": o.host,
            "rtt_ms": o.rtt_ms,
            "entries": len(o.entries),
            "bytes": sum(e.size for e in o.entries),
            "first": o.entries[0].url,
        }
        for o in a.origins
    ]
    if as_json:
        print_json({**_summary(a), "origins": per_origin})
        return
    out.print(
        f"{a.name}: {a.main}; {_source(a)}; {len(a.origins)} origins, {len(a.entries())} "
        f"entries, {a.total_bytes()} bytes; digest {a.digest()}",
        highlight=False,
        soft_wrap=True,
    )
    t = Table()
    for col in ("host", "rtt ms", "entries", "bytes", "first request"):
        t.add_column(col, justify="left" if col in ("host", "first request") else "right")
    for o in a.origins:
        rtt = "-" if o.rtt_ms is None else f"{o.rtt_ms:.1f}"
        size = sum(e.size for e in o.entries)
        first = o.entries[0].url.removeprefix(o.origin)
        t.add_row(o.host, rtt, str(len(o.entries)), str(size), first)
    out.print(t)
