"""A replayed multi-origin page measured in a real cell (issue 40): each origin on its own
address with its own certificate, every request answered from the archive and judged
per request from the browser's HAR."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SharedLinks

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.replay import archive as arch
from quicbed.replay.archive import Archive, Entry, Origin
from quicbed.replay.serve import OriginServe, ReplayServe
from quicbed.results.store import Store
from quicbed.run.cell import CellResult
from quicbed.spec.cellconfig import CellConfig, make_cell

ORIGINS = ("www.t3.example", "static.t3.example", "img.t3.example")


def _entry(
    url: str, body: bytes, ctype: str, bodies: dict[str, bytes], wait_ms: float | None = None
) -> Entry:
    sha = hashlib.sha256(body).hexdigest()
    bodies[sha] = body
    headers = (("content-type", ctype), ("cache-control", "max-age=60"))
    return Entry(
        method="GET",
        url=url,
        status=200,
        headers=headers,
        body=sha,
        size=len(body),
        wait_ms=wait_ms,
    )


def three_origins(
    store: Path,
    rtts: tuple[float | None, float | None, float | None] = (None, None, None),
    waits: dict[str, float] | None = None,
) -> Archive:
    """A page on three origins: its HTML links a stylesheet on a second origin, which
    pulls a background image from a third; a script on the second origin adds an image
    from the third with a cache-buster in its query (answered by path: recorded without
    one). ``rtts``: each origin's recorded RTT (ms; None: none recorded); ``waits``:
    recorded server times (ms) by URL."""
    w = waits or {}
    www, static, img = (f"https://{h}" for h in ORIGINS)
    bodies: dict[str, bytes] = {}
    html = (
        "<!doctype html><html><head><title>t3</title>"
        f'<link rel="stylesheet" href="{static}/site.css">'
        f'<script src="{static}/app.js"></script></head>'
        '<body><h1>Three origins</h1><p class="hero">replayed</p></body></html>'
    ).encode()
    css = f".hero {{ background: url({img}/bg.png); height: 40px }}".encode()
    js = (
        "window.addEventListener('DOMContentLoaded', () => {"
        "  const i = document.createElement('img');"
        f"  i.src = '{img}/a.png?cb=' + Date.now();"
        "  document.body.appendChild(i);"
        "});"
    ).encode()
    png = bytes.fromhex(  # a 1x1 PNG
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a1bd8f4a0000000049454e44ae426082"
    )
    a = Archive(
        name="t3",
        main=f"{www}/",
        origins=(
            Origin(
                origin=www,
                host=ORIGINS[0],
                rtt_ms=rtts[0],
                entries=(_entry(f"{www}/", html, "text/html", bodies, w.get(f"{www}/")),),
            ),
            Origin(
                origin=static,
                host=ORIGINS[1],
                rtt_ms=rtts[1],
                entries=(
                    _entry(
                        f"{static}/site.css", css, "text/css", bodies, w.get(f"{static}/site.css")
                    ),
                    _entry(
                        f"{static}/app.js", js, "text/javascript", bodies, w.get(f"{static}/app.js")
                    ),
                ),
            ),
            Origin(
                origin=img,
                host=ORIGINS[2],
                rtt_ms=rtts[2],
                entries=(
                    _entry(f"{img}/bg.png", png, "image/png", bodies, w.get(f"{img}/bg.png")),
                    _entry(f"{img}/a.png", png + b"\0", "image/png", bodies, w.get(f"{img}/a.png")),
                ),
            ),
        ),
    )
    arch.save(a, bodies, store / a.name)
    return a


@pytest.fixture
def page_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    store = tmp_path / "pages"
    monkeypatch.setenv("QUICBED_PAGES", str(store))
    yield store


def test_a_cell_names_an_archive_by_name_and_is_identified_by_its_content(
    page_store: Path,
) -> None:
    a = three_origins(page_store)
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    cfg = make_cell(condition=cond, page="t3", arms=["h2"])
    assert cfg.replay == a.digest()
    plain = make_cell(condition=cond, page="5kb", arms=["h2"])
    assert plain.replay is None and "replay" not in plain.model_dump(exclude_defaults=True)
    with pytest.raises(QuicbedError, match="cannot serve a replayed page"):
        make_cell(condition=cond, page="t3", arms=["h2", "h3-quiche"])


def _t3_run(shared_links: SharedLinks, tmp_path: Path, **cell: Any) -> CellResult:
    """three_origins' page measured at 10 Mbit/s, 36 ms with ``cell``'s settings, into
    ``tmp_path / "res"``: the cell done."""
    cfg = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="t3", **cell)
    r = shared_links.run_cell(cfg, tmp_path / "res")
    assert r.status == "done", r
    return r


def _t3_cell(shared_links: SharedLinks, tmp_path: Path, **cell: Any) -> CellResult:
    """:func:`_t3_run`, every load valid."""
    r = _t3_run(shared_links, tmp_path, **cell)
    assert not r.invalid, r.invalid
    return r


#: the recorded RTTs of three_origins' origins in the per-origin tests (ms; the first
#: recorded none, so the link adds nothing for it)
RECORDED = (None, 30.0, 60.0)
#: where the origins are on the testbed (quicbed.replay.serve.origin_ips)
ORIGIN_IPS = ("10.10.1.100", "10.10.1.101", "10.10.1.102")


def test_origin_rtt_resolves_into_the_link_from_the_archive(page_store: Path) -> None:
    """``origin_rtt`` puts each origin's RTT into the cell's link, by the address the
    origin gets: the recorded ones, or one for all; the cell's identity changes with it
    and not without it."""
    three_origins(page_store, RECORDED)
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    plain = make_cell(condition=cond, page="t3", arms=["h2"])
    rec = make_cell(condition=cond, page="t3", arms=["h2"], origin_rtt="Recorded")
    assert rec.origin_rtt == "recorded"
    assert rec.condition.origin_rtt == "10.10.1.100=0,10.10.1.101=30,10.10.1.102=60"
    assert rec.condition.origin_rtts() == dict(zip(ORIGIN_IPS, (0, 30, 60), strict=True))
    assert "origin_rtt" not in json.dumps(plain.model_dump(mode="json", exclude_defaults=True))
    assert plain.cell_id() == make_cell(condition=cond, page="t3", arms=["h2"]).cell_id()
    same = make_cell(condition=cond, page="t3", arms=["h2"], origin_rtt=40)
    assert same.condition.origin_rtt == ",".join(f"{ip}=40" for ip in ORIGIN_IPS)
    assert len({plain.cell_id(), rec.cell_id(), same.cell_id()}) == 3
    # a stored cell keeps what it resolved to: read back without the archive
    stored = rec.model_dump(mode="json")
    arch.store().joinpath("t3", "archive.json").unlink()
    again = CellConfig.model_validate(stored)
    assert again.cell_id() == rec.cell_id()
    # half of each origin's RTT each way after the bottleneck, the odd us down
    down, up = (p.address_delay_us for p in rec.condition.pipes().values())
    assert down == {"10.10.1.100": 0, "10.10.1.101": 15000, "10.10.1.102": 30000} == up
    assert "3 origin(s) +0..60 ms" in rec.condition.label()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"page": "5kb", "origin_rtt": "recorded"}, "origin_rtt 'recorded' places a replayed"),
        ({"page": "t3", "origin_rtt": "far"}, "origin_rtt 'far': recorded"),
        ({"page": "t3", "origin_rtt": -3}, "origin_rtt -3: recorded"),
        ({"page": "t3", "origin_rtt": "nan"}, "origin_rtt 'nan': recorded"),
        ({"page": "t3", "shaper": "netem", "origin_rtt": 5}, "the netem shaper delays every"),
    ],
)
def test_bad_origin_rtts_are_named(page_store: Path, kwargs: dict[str, Any], message: str) -> None:
    three_origins(page_store, RECORDED)
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    with pytest.raises(QuicbedError, match=re.escape(message)):
        make_cell(condition=cond, arms=["h2"], **kwargs)


def test_a_link_with_origin_rtts_needs_the_cells_setting(page_store: Path) -> None:
    three_origins(page_store, RECORDED)
    cond = make_condition(rate_mbit=10, rtt_ms=36, origin_rtt="10.10.1.100=5")
    for page in ("t3", "5kb"):
        with pytest.raises(QuicbedError, match="is a replayed page's: set the cell's origin_rtt"):
            make_cell(condition=cond, page=page, arms=["h2"])


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_each_origin_is_at_its_recorded_distance_in_the_receipt_and_every_load(
    shared_links: SharedLinks, page_store: Path, tmp_path: Path
) -> None:
    """Issue 40 item 3: with ``origin_rtt: recorded`` the emulator adds each origin's
    recorded RTT on top of the link's: the receipt pings every origin address and finds
    it there; every h2 load's TCP handshake to an origin (HAR connect less TLS) takes
    the link's RTT plus that origin's."""
    three_origins(page_store, RECORDED)
    _t3_cell(
        shared_links,
        tmp_path,
        arms=["h2", "h3"],
        runs=2,
        warmup=0,
        mode="1rtt",
        origin_rtt="recorded",
        key_exchange="stack",  # nothing pinned: the hellos are captured for the replay
    )
    store = Store.open_readonly(tmp_path / "res")
    try:
        (row,) = store.receipts()
        checks = {c["name"]: c for c in row["receipt"]["checks"]}
        base = checks["rtt"]["expected"]
        for ip, extra in zip(ORIGIN_IPS, (0, 30, 60), strict=True):
            c = checks[f"rtt {ip}"]
            assert c["passed"] and c["expected"] == pytest.approx(base + extra), c
            assert abs(c["measured"] - base - extra) < 3, c
        runs = [x for x in store.all_runs() if not x.warmup and x.valid]
        assert sorted(x.arm for x in runs) == ["h2"] * 2 + ["h3"] * 2
        for run in runs:
            entries = run.detail["entries"]
            assert {e["host"] for e in entries} == set(ORIGINS)
            # each origin's handshakes seen on the wire (reused_off_requests reads them)
            hellos = run.detail["server"]["tls_hellos"]
            assert {h["server_ip"] for h in hellos} == set(ORIGIN_IPS), hellos
            if run.arm != "h2":
                continue
            for host, extra in zip(ORIGINS, (0, 30, 60), strict=True):
                # the TCP handshake of each origin's connection: one round trip
                tcp = [e["connect"] - e["ssl"] for e in entries if e["host"] == host]
                tcp = [t for t in tcp if t > 0]
                assert tcp, (host, entries)
                assert all(36 + extra - 2 < t < 36 + extra + 25 for t in tcp), (host, tcp)
    finally:
        store.close()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("browser", ["chromium", "firefox"])
def test_a_replayed_page_is_served_per_origin_and_verified_per_request_on_both_arms(
    shared_links: SharedLinks, page_store: Path, tmp_path: Path, browser: str
) -> None:
    """In Chromium (its resolver rules) and in Firefox (its driver's resolver overrides
    and alt-svc mappings), every origin at its own address on both arms."""
    a = three_origins(page_store)
    _t3_cell(
        shared_links,
        tmp_path,
        arms=["h2", "h3"],
        runs=3,
        warmup=1,
        browser=browser,
    )
    store = Store.open_readonly(tmp_path / "res")
    try:
        runs = [x for x in store.all_runs() if not x.warmup and x.valid]
        # 3 per arm; a load the busy host spoiled is replaced, and the invalid one kept
        assert sorted(x.arm for x in runs) == ["h2"] * 3 + ["h3"] * 3
        for run in runs:
            entries = run.detail["entries"]
            by_url = {e["url"].split("?")[0]: e for e in entries}
            # every origin reached, over the arm's protocol, each request answered as
            # the rule says, by Apache and by quic-go alike
            assert {e["host"] for e in entries} == set(ORIGINS)
            assert {e["protocol"] for e in entries} == {run.arm}
            assert by_url[f"https://{ORIGINS[2]}/a.png"]["replay"] == "path"
            assert by_url[f"https://{ORIGINS[2]}/bg.png"]["replay"] == "url"
            sizes = {e["url"].split("?")[0]: e["body_bytes"] for e in entries}
            assert sizes[f"https://{ORIGINS[0]}/"] == 242  # the page's own origin: seen
            if browser == "chromium":  # every size, from the browser's network events
                assert sizes[f"https://{ORIGINS[2]}/a.png"] == 71  # not bg.png's
                assert run.bytes == sum(e.size for e in a.entries())
            else:  # Firefox cannot see another origin's no-cors sizes: unknown, not 0
                others = [n for u, n in sizes.items() if ORIGINS[0] not in u]
                assert others and set(others) == {-1}, sizes
            # every handshake captured, by the address of its origin (a replay cell's
            # capture runs whatever key exchange the arm pins); each origin resumed on one
            hellos = run.detail["server"]["tls_hellos"]
            assert {h["server_ip"] for h in hellos} == set(ORIGIN_IPS), hellos
            if run.arm == "h2":
                assert {h["server_ip"] for h in hellos if h["resumed"]} == set(ORIGIN_IPS)
    finally:
        store.close()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_envoy_replays_the_page_beside_apache_and_quic_go(
    shared_links: SharedLinks, page_store: Path, tmp_path: Path
) -> None:
    """The three-origin page on h2, h3 and h3-envoy (Google QUICHE, on the second QUIC
    port, 4433, which the browser's host map carries): every load of every arm valid,
    every origin reached over the arm's protocol, each request answered as the rule
    says; Envoy's loads 0-RTT by its own log on every connection, CUBIC by its senders."""
    a = three_origins(page_store)
    r = _t3_cell(
        shared_links,
        tmp_path,
        arms=["h2", "h3", "h3-envoy"],
        runs=3,
        warmup=1,
    )
    assert r.verified["h3-envoy"]["cc"] == ["cubic"], r.verified
    store = Store.open_readonly(tmp_path / "res")
    try:
        runs = [x for x in store.all_runs() if not x.warmup and x.valid]
        assert sorted(x.arm for x in runs) == ["h2"] * 3 + ["h3"] * 3 + ["h3-envoy"] * 3
        for run in runs:
            entries = run.detail["entries"]
            by_url = {e["url"].split("?")[0]: e for e in entries}
            assert {e["host"] for e in entries} == set(ORIGINS)
            protocol = "h3" if run.arm.startswith("h3") else "h2"
            assert {e["protocol"] for e in entries} == {protocol}
            assert by_url[f"https://{ORIGINS[2]}/a.png"]["replay"] == "path"
            others = {u: e["replay"] for u, e in by_url.items() if not u.endswith("/a.png")}
            assert set(others.values()) == {"url"}, others
            assert by_url[f"https://{ORIGINS[2]}/a.png"]["body_bytes"] == 71  # not bg.png's
            assert run.bytes == sum(e.size for e in a.entries())
            if run.arm == "h3-envoy":
                srv = run.detail["server"]
                # one connection per origin, each with a request in 0-RTT (Envoy's log)
                assert srv["server_connections"] == len(ORIGINS), srv
                assert srv["server_early_connections"] == len(ORIGINS), srv
                assert srv["server_replay"] == {"url": 4, "path": 1}, srv
    finally:
        store.close()


def _seen(a: Archive, url: str, **kw: object) -> dict[str, object]:
    """A load's HAR entry for ``url`` as a replayed h3 load records it when all is
    well (answered by URL, the archive's status and size); ``kw`` spoils it."""
    found = a.match("GET", url)
    size = found[0].size if found else 0
    base = {"url": url, "host": url.split("/")[2], "method": "GET", "status": 200}
    return {**base, "protocol": "h3", "replay": "url", "body_bytes": size, **kw}


#: recorded server times of three_origins' entries in the server-time tests (ms)
WAITS = {
    f"https://{ORIGINS[0]}/": 150.0,
    f"https://{ORIGINS[1]}/site.css": 60.0,
    f"https://{ORIGINS[2]}/bg.png": 80.0,
}


def test_server_time_is_a_replayed_pages_setting(page_store: Path) -> None:
    """``server_time``: recorded, or none (the default, which leaves the cell's identity
    as it was); refused by name for another value or a page that is not replayed."""
    three_origins(page_store, waits=WAITS)
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    plain = make_cell(condition=cond, page="t3", arms=["h2"])
    timed = make_cell(condition=cond, page="t3", arms=["h2"], server_time="Recorded")
    assert timed.server_time == "recorded" and timed.cell_id() != plain.cell_id()
    for none in ("none", "off", None):
        assert make_cell(condition=cond, page="t3", arms=["h2"], server_time=none) == plain
    with pytest.raises(QuicbedError, match=re.escape("server_time 'slow': recorded (each")):
        make_cell(condition=cond, page="t3", arms=["h2"], server_time="slow")
    with pytest.raises(QuicbedError, match="server_time recorded: a replayed page's recorded"):
        make_cell(condition=cond, page="5kb", arms=["h2"], server_time="recorded")


def test_what_each_server_says_it_sent_is_judged_against_the_archive(page_store: Path) -> None:
    """By each server's own word (a load's ``replay_served``): a body not at its entry's
    size, a response held less than its recorded server time (server time on) or held
    at all (off), a response from no entry, and a log that cannot say, each make the
    load invalid, named. The three stacks' logs read into it."""
    from quicbed.replay.verify import served_reasons
    from quicbed.servers import apache, envoy, quic_go

    a = three_origins(page_store, waits=WAITS)
    www, css = f"https://{ORIGINS[0]}/", f"https://{ORIGINS[1]}/site.css"
    js = f"https://{ORIGINS[1]}/app.js"  # no server time recorded
    size = {e.url: e.size for e in a.entries()}
    held = [
        {"method": "GET", "entry": www, "bytes": size[www], "slept_ms": 150.2},
        # Apache's: the entry by its place (origin 1, entry 0: site.css)
        {"method": "GET", "entry_ref": "o1/e0", "bytes": size[css], "slept_ms": 60.0},
        {"method": "GET", "entry": js, "bytes": size[js], "slept_ms": 0},
    ]
    assert served_reasons(held, a, True) == []
    assert served_reasons(held, a, False) == [
        f"2 responses held though the cell's server time is off: {www} (150.2 ms), {css} (60 ms)"
    ]
    short = [{**held[0], "slept_ms": 0}, {**held[1], "slept_ms": 54.5}, held[2]]
    assert served_reasons(short, a, True) == [
        f"2 responses held less than their recorded server time: {www} (0 ms of 150), "
        f"{css} (54.5 ms of 60)"
    ]
    assert served_reasons([{**held[0], "slept_ms": 147}], a, True) == []  # Envoy's 0-RTT
    cut = [{**held[0], "bytes": 100}, {**held[1], "entry_ref": "o9/e0"}]
    assert served_reasons(cut, a, True) == [
        "1 responses from no entry of the archive, by the server's log: o9/e0",
        f"1 bodies the server sent not at the archive's size: {www} (100 bytes, recorded "
        f"{size[www]})",
    ]
    assert served_reasons(None, a, False) == [
        "the server's log does not say what it sent per request (a server or role older "
        "than quicbed: run make setup)"
    ]
    # quic-go's replay records, Envoy's access log (DI: the fault filter held it), and
    # Apache's last fields (us, the entry; "-" where none)
    qg = quic_go.quic_load_facts(
        [
            json.dumps(
                {"event": "replay", "method": "GET", "entry": www, "bytes": 9, "wait_ms": 150.4}
            ),
            json.dumps({"event": "replay", "method": "GET", "entry": None, "wait_ms": 0}),
        ]
    )
    assert qg["replay_served"] == [{"method": "GET", "entry": www, "bytes": 9, "slept_ms": 150.4}]
    ev = envoy.replay_served(
        [
            {"route": f"url GET {www}", "flags": "DI", "duration_ms": "151", "bytes": "242"},
            {"route": f"path GET {css}", "flags": "-", "duration_ms": "2", "bytes": "61"},
            {"route": "none", "flags": "-", "duration_ms": "1", "bytes": "0"},
        ]
    )
    assert ev == [
        {"method": "GET", "entry": www, "bytes": 242, "slept_ms": 151.0},
        {"method": "GET", "entry": css, "bytes": 61, "slept_ms": 0.0},
    ]
    line = (
        "1.5 10.10.1.2 HTTP/2.0 GET /site.css 200 50 TLSv1.3 Initial 7 0 40001 "
        f"{ORIGINS[1]} TLS_AES_128_GCM_SHA256 "
    )
    reqs = apache.log_requests([line + "60000 60000 o1/e0", line + "0 - o1/e0", line + "- - -"])
    assert apache.replay_served(reqs) == [
        {"method": "GET", "entry_ref": "o1/e0", "bytes": 50, "slept_ms": 60.0},
        {"method": "GET", "entry_ref": "o1/e0", "bytes": 50, "slept_ms": 0.0},
    ]
    assert apache.replay_served(apache.log_requests([line.strip()])) == []  # an older role


def test_apache_sleeps_the_recorded_server_time_only_where_asked(
    page_store: Path, tmp_path: Path
) -> None:
    """Apache's replay tree carries each entry's server time in its maps (us) and the
    hook that sleeps it, loaded only under the define a waiting arm starts Apache with."""
    from quicbed.servers import apache_replay
    from quicbed.servers.apache import ApacheServer
    from quicbed.servers.webserver import Arm, ServeSpec
    from quicbed.testbed.lifecycle import RPath

    a = three_origins(page_store, waits=WAITS)
    serve = ReplayServe(
        name=a.name,
        digest=a.digest(),
        archive=RPath("/srv/t3"),
        main=a.main,
        origins=tuple(
            OriginServe(o.host, ip, 443, RPath(f"/tls/{o.host}.pem"))
            for o, ip in zip(a.origins, ORIGIN_IPS, strict=True)
        ),
        wait=True,
    )
    apache_replay.write_tree(page_store / "t3", a, serve, tmp_path / "tree", "/tls/k.pem")
    maps = {p.parent.name + "/" + p.name: p.read_text() for p in (tmp_path / "tree").rglob("*.map")}
    assert maps["o0/exact.map"] == "GET:/ e0:150000\n"
    assert maps["o1/exact.map"] == "GET:/site.css e0:60000\nGET:/app.js e1:0\n"
    conf = (tmp_path / "tree" / apache_replay.CONF).read_text()
    tree = f"/srv/t3/{apache_replay.TREE}"
    hook = f'<IfDefine QUICBED_REPLAY_WAIT>\nLuaHookFixups "{tree}/wait.lua" wait'
    assert hook in conf and conf.count("E=QB_WAIT_US:%2") == 2 * len(ORIGINS)
    assert conf.count("E=QB_ENTRY:o2/%1]") == 2  # each answered request names its entry
    assert "r.usleep(us)" in (tmp_path / "tree" / apache_replay.WAIT_HOOK).read_text()
    arm = Arm("h2", "apache", "h2", "tcp", "cubic", {}, 443)
    for wait in (True, False):
        spec = ServeSpec(
            docroot=RPath("/www"),
            cert=RPath("/c"),
            key=RPath("/k"),
            logdir=RPath("/l"),
            replay=dataclasses.replace(serve, wait=wait),
        )
        argv = ApacheServer(None, spec, arm).argv()  # type: ignore[arg-type]
        assert ("QUICBED_REPLAY_WAIT" in argv) is wait, argv


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_every_server_waits_each_responses_recorded_server_time(
    shared_links: SharedLinks, page_store: Path, tmp_path: Path
) -> None:
    """Issue 40 item 3: with ``server_time: recorded`` Apache (its mod_lua hook), quic-go
    (-replay-wait) and Envoy (its fault filter) each hold every response its entry's
    recorded server time, which every valid load's HAR shows (a response sooner makes
    its load invalid, named); and not much longer."""
    from quicbed.replay.verify import WAIT_SLACK_MS, served_entry

    a = three_origins(page_store, waits=WAITS)
    r = _t3_run(
        shared_links,
        tmp_path,
        arms=["h2", "h3", "h3-envoy"],
        runs=2,
        warmup=1,
        server_time="recorded",
    )
    # Envoy's fault timer counts from its event loop's cached clock, so a request
    # decoded late in a long loop turn is answered early (here: 73 ms logged for 80, and
    # the browser's wait as short). Verification keeps such a load invalid and names it
    # (it is not replaced: replacing is for loads the host or the link spoiled); no
    # other stack and no other reason.
    early = re.compile(r"#\d+: \d+ responses held less than their recorded server time: ")
    assert all(
        arm == "h3-envoy" and all(early.match(x) for x in xs) for arm, xs in r.invalid.items()
    ), r.invalid
    store = Store.open_readonly(tmp_path / "res")
    try:
        runs = [x for x in store.all_runs() if not x.warmup and x.valid]
        short = [x for x in store.all_runs() if not x.warmup and not x.valid]
        assert all(x.arm == "h3-envoy" for x in short), [(x.arm, x.reason) for x in short]
        assert sorted(x.arm for x in runs) == (
            ["h2"] * 2 + ["h3"] * 2 + ["h3-envoy"] * (2 - len(short))
        )
        for run in runs:
            waited = {e["url"]: e["wait"] for e in run.detail["entries"]}
            print(run.arm, {u: round(waited[u], 1) for u in WAITS})  # for the record (-s)
            for url, ms in WAITS.items():
                # the server time and one round trip, less the slack verification grants
                # a server: Envoy's fault timer starts from its loop's cached clock (CI
                # saw h3-envoy's page wait 182.6 ms for 150 + 36; Apache and quic-go
                # measured 1-4 ms more than the sum)
                assert ms + 36 - WAIT_SLACK_MS <= waited[url] < ms + 36 + 40, (run.arm, url, waited)
            # and by the server's own word, each response held its entry's time
            slept = {
                str(getattr(served_entry(w, a), "url", None)): w["slept_ms"]
                for w in run.detail["server"]["replay_served"]
            }
            assert all(slept[u] >= ms - WAIT_SLACK_MS for u, ms in WAITS.items()), (run.arm, slept)
    finally:
        store.close()


def test_a_load_is_judged_per_request_against_the_archive(page_store: Path) -> None:
    """Each kind of failure named by its URL: an unmatched request, a response from a
    server that is not replaying, a status or size not the archive's, another protocol,
    a host the archive has not."""
    from quicbed.replay.verify import reasons

    a = three_origins(page_store)
    www, img = f"https://{ORIGINS[0]}/", f"https://{ORIGINS[2]}/bg.png"

    def e(url: str, **kw: object) -> dict[str, object]:
        return _seen(a, url, **kw)

    assert reasons([e(www), e(img)], a, "h3") == []
    assert reasons([e(www), e(img, body_bytes=-1)], a, "h3") == []  # a size not seen
    got = reasons(
        [
            e(www, replay="none", status=404),
            e(img, replay=None),
            e(f"https://{ORIGINS[1]}/site.css", status=500),
            e(f"https://{ORIGINS[1]}/app.js", body_bytes=3),
            e(f"https://{ORIGINS[2]}/a.png", protocol="h2"),
            e("https://elsewhere.example/x.js"),
        ],
        a,
        "h3",
    )
    assert got == [
        "1 requests to hosts the archive has not: https://elsewhere.example/x.js",
        f"1 unmatched requests: {www}",
        f"1 responses without the x-quicbed-replay header (not from a replay server): {img}",
        f"1 statuses not the archive's: https://{ORIGINS[1]}/site.css (500, recorded 200)",
        f"1 bodies not the archive's size: https://{ORIGINS[1]}/app.js (3 bytes, recorded 185)",
        f"1 responses not over h3: https://{ORIGINS[2]}/a.png (h2)",
    ]


def cross_site_iframe(store: Path) -> Archive:
    """A page whose iframe is of another site (its own renderer under site isolation),
    and the iframe's image from that site."""
    www, ads = "https://www.t4.example", "https://ads.t4-ads.example"
    bodies: dict[str, bytes] = {}
    html = (
        "<!doctype html><html><head><title>t4</title></head><body><h1>Framed</h1>"
        f'<iframe src="{ads}/frame.html" width="200" height="100"></iframe></body></html>'
    ).encode()
    frame = f'<!doctype html><html><body><img src="{ads}/ad.png"></body></html>'.encode()
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a1bd8f4a0000000049454e44ae426082"
    )
    a = Archive(
        name="t4",
        main=f"{www}/",
        origins=(
            Origin(
                origin=www,
                host="www.t4.example",
                entries=(_entry(f"{www}/", html, "text/html", bodies),),
            ),
            Origin(
                origin=ads,
                host="ads.t4-ads.example",
                entries=(
                    _entry(f"{ads}/frame.html", frame, "text/html", bodies),
                    _entry(f"{ads}/ad.png", png, "image/png", bodies),
                ),
            ),
        ),
    )
    arch.save(a, bodies, store / a.name)
    return a


def test_a_replayed_load_in_0rtt_mode_needs_every_origin_warm_not_every_connection(
    page_store: Path,
) -> None:
    """A replayed page's 0-RTT load is judged per origin: a second connection to an origin
    that found no ticket left is the browser's policy (quicbed.servers.webserver.
    cold_origins), an origin with no reused connection is not; a page of one origin, or a
    log that names no origins, keeps the rule that every connection reuses."""
    from quicbed.run.cell import _judge
    from quicbed.servers.webserver import Arm

    a = three_origins(page_store)
    entries = [_seen(a, e.url) for e in a.entries()]

    class Server:  # what _judge asks of a server: the facts are the test's
        name = "quic-go"
        arm = Arm("h3", "quic-go", "h3", "udp", "cubic")

        def page_protocol(self) -> str:
            return "h3"

        def running(self) -> bool:
            return True

        def evidence(self, facts: dict[str, object]) -> list[str]:
            return []

    cfg = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="t3", arms=["h3"])
    ok = {"ok": True}
    page = {"archive": a}

    # what the server says it sent: every entry whole (quicbed.replay.verify.served_reasons)
    served = [{"method": "GET", "entry": e.url, "bytes": e.size} for e in a.entries()]

    def judge(**facts: object) -> list[str]:
        f = {"connections": 4, "used_0rtt": False, "replay_served": served, **facts}
        return _judge(cfg, Server(), False, ok, {"entries": entries}, f, page)  # type: ignore[arg-type]

    assert judge(cold_origins=[], cold_connections=1) == []
    assert judge(cold_origins=["img.t3.example"], cold_connections=2) == [
        "the quic-go log shows no 0-RTT to img.t3.example on this load"
    ]
    assert judge() == ["the QUIC server's log shows no 0-RTT on this load"]


def test_an_origin_reused_on_a_connection_without_requests_is_warm_and_named() -> None:
    """Chromium's idle second connection to an origin may take its ticket while the
    requests go over a full handshake (quicbed.servers.webserver.reused_off_requests):
    the hello capture's resumed TCP handshake to the origin's address keeps it warm and
    names it; a QUIC resumption (not 0-RTT) or another origin's does not."""
    from quicbed.servers.webserver import reused_off_requests

    hosts = dict(zip(ORIGINS, ORIGIN_IPS, strict=True))

    def hello(ip: str, resumed: bool, transport: str = "tcp") -> dict[str, object]:
        return {"transport": transport, "server_ip": ip, "resumed": resumed}

    cold = {"cold_origins": ["img.t3.example"], "cold_connections": 3}
    spare = [hello(ORIGIN_IPS[2], False), hello(ORIGIN_IPS[2], True), hello(ORIGIN_IPS[0], True)]
    assert reused_off_requests({**cold, "tls_hellos": spare}, hosts) == {
        "cold_origins": [],
        "reused_off_requests": ["img.t3.example"],
    }
    for hellos in (
        [hello(ORIGIN_IPS[2], False), hello(ORIGIN_IPS[1], True)],  # another origin's
        [hello(ORIGIN_IPS[2], True, "quic")],  # a QUIC resumption is no 0-RTT
        [],
    ):
        assert reused_off_requests({**cold, "tls_hellos": hellos}, hosts) == {}
    assert reused_off_requests(cold, hosts) == {}  # no capture: the log's answer stands
    assert reused_off_requests({"cold_origins": [], "tls_hellos": spare}, hosts) == {}


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("browser", ["chromium", "firefox"])
def test_a_cross_site_iframes_requests_are_recorded_and_judged(
    shared_links: SharedLinks, page_store: Path, tmp_path: Path, browser: str
) -> None:
    """A cross-site iframe is a target (Chromium: a renderer of its own, which the
    driver attaches to) or a browsing context (Firefox: a child of the tab's, whose
    network events the driver takes too) of its own: the iframe's document and image
    are in every load's HAR, each answered by the archive, over the arm's protocol."""
    a = cross_site_iframe(page_store)
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36),
        page="t4",
        arms=["h2", "h3"],
        runs=2,
        browser=browser,
    )
    r = shared_links.run_cell(cfg, tmp_path / "res")
    assert r.status == "done" and not r.invalid, r
    store = Store.open_readonly(tmp_path / "res")
    try:
        runs = [x for x in store.all_runs() if x.valid]
        assert runs
        for run in runs:
            urls = sorted(e["url"] for e in run.detail["entries"])
            assert urls == sorted(e.url for e in a.entries()), urls
            assert {e["replay"] for e in run.detail["entries"]} == {"url"}
            assert {e["protocol"] for e in run.detail["entries"]} == {run.arm}
            if browser == "chromium":
                assert run.detail["frames"]["attached"] >= 1, run.detail.get("frames")
    finally:
        store.close()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_recorded_load_is_imported_and_replayed_with_every_request_matched(
    shared_links: SharedLinks, page_store: Path, tmp_path: Path
) -> None:
    """The round trip: the p25 page model (14 origins) loaded once at traces level full
    (its HAR keeps every body), that HAR imported as a new archive, and the archive
    replayed on both arms, every request of every load answered by URL. In 1-RTT mode:
    what is checked is the import and the matching; the per-origin resumption rule of
    0-RTT mode is checked on real loads by the tests above (three origins and a
    cross-site frame). On this page of 14 origins it now and then found an origin none of
    whose connections resumed (in make test, never on demand): the browser's own policy,
    most likely (not proven) a preconnected socket that took the origin's single-use
    ticket and was closed before it read the server's new ones."""
    import gzip

    from quicbed.replay.harimport import import_har

    rec = make_cell(
        condition=make_condition(rate_mbit=50, rtt_ms=20),
        page="p25",
        arms=["h2"],
        runs=2,
        mode="1rtt",
    )
    r = shared_links.run_cell(rec, tmp_path / "rec", traces="full")
    assert r.status == "done" and not r.invalid, r
    store = Store.open_readonly(tmp_path / "rec")
    try:
        run = next(x for x in store.all_runs() if not x.warmup and x.valid)
    finally:
        store.close()
    # its capture holds every origin's packets (each origin at its own address), each
    # connection's chain its origin's own leaf: the handshakes and the wire read from it
    origins_reached = len(run.detail["by_origin"])
    shakes = run.detail["handshake"]
    assert shakes["connections"] >= origins_reached, shakes
    assert shakes["chain_problems"] == [], shakes["chain_problems"]
    assert run.detail["wire"]["connections"] >= origins_reached, run.detail["wire"]
    har = tmp_path / "p25.har"
    with gzip.open(tmp_path / "rec" / str(run.har_path)) as f:
        har.write_bytes(f.read())
    imported = import_har(har, "p25-recorded", page_store)
    model = arch.load(arch.find("p25"), check_bodies=False)  # type: ignore[arg-type]
    assert len(imported.origins) == len(model.origins)
    assert {e.url for e in imported.entries()} == {e["url"] for e in run.detail["entries"]}

    cfg = make_cell(
        condition=rec.condition, page="p25-recorded", arms=["h2", "h3"], runs=2, mode="1rtt"
    )
    r = shared_links.run_cell(cfg, tmp_path / "replay")
    assert r.status == "done" and not r.invalid, r
    store = Store.open_readonly(tmp_path / "replay")
    try:
        for x in store.all_runs():
            assert {e["replay"] for e in x.detail["entries"]} == {"url"}, x.reason
    finally:
        store.close()
