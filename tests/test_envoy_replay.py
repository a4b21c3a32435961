"""The envoy stack replaying an archive (issue 40): the configuration
quicbed.servers.envoy_config makes for a replayed page (a filter chain per origin by
server name, each origin's routes in the matching rule's order, the recorded headers),
judged on a small archive and on the matching rule's shared table; a real cell is in
tests/test_replay_cell.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_replay_cell import ORIGINS, WAITS, three_origins

from quicbed.replay import archive as arch
from quicbed.replay.archive import Archive, Entry, Origin
from quicbed.replay.serve import OriginServe, ReplayServe
from quicbed.replay.verify import REPLAY_HEADER
from quicbed.servers import envoy, envoy_config
from quicbed.servers.webserver import Arm, ServeSpec
from quicbed.testbed.lifecycle import RPath

TABLE = Path(__file__).parent / "data" / "replay" / "match-cases.json"


def _serve(folder: Path, a: Archive, certs: dict[str, Path] | None = None) -> ReplayServe:
    """What a cell would give the servers for ``a`` in ``folder`` (its origins on 443;
    each origin's certificate from ``certs``, else a made-up path)."""
    return ReplayServe(
        name=a.name,
        digest=a.digest(),
        archive=RPath(folder),
        main=a.main,
        origins=tuple(
            OriginServe(
                o.host,
                f"10.10.1.{100 + i}",
                o.port,
                RPath((certs or {}).get(o.host) or f"/tls/{o.host}.pem"),
            )
            for i, o in enumerate(a.origins)
            if o.port == 443
        ),
    )


def _server(tmp_path: Path, serve: ReplayServe | None, port: int = 4433) -> envoy.EnvoyServer:
    """An ``h3-envoy`` arm's server for ``serve`` (its settings need no testbed)."""
    spec = ServeSpec(
        docroot=RPath(tmp_path / "www"),
        cert=RPath("/tls/server.pem"),
        key=RPath("/tls/server.key"),
        logdir=RPath(tmp_path / "logs"),
        replay=serve,
    )
    arm = Arm("h3-envoy", "envoy", "h3", "udp", "cubic", {}, port)
    return envoy.EnvoyServer(None, spec, arm)  # no testbed: settings() asks none


def _config(tmp_path: Path, a: Archive) -> dict[str, Any]:
    srv = _server(tmp_path, _serve(tmp_path / "pages" / a.name, a))
    return envoy_config.config(srv.settings())


def _chains(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    chains: list[dict[str, Any]] = cfg["static_resources"]["listeners"][0]["filter_chains"]
    return chains


def _hcm(chain: dict[str, Any]) -> dict[str, Any]:
    hcm: dict[str, Any] = chain["filters"][0]["typed_config"]
    return hcm


def _headers(route: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (h["header"]["key"], h["header"]["value"], h["append_action"])
        for h in route["response_headers_to_add"]
    ]


def test_the_replay_header_and_archive_layout_are_the_replays() -> None:
    """envoy_config restates them (it runs on the node with the standard library)."""
    assert envoy_config.REPLAY_HEADER == REPLAY_HEADER
    assert (envoy_config.MANIFEST, envoy_config.BODIES) == (arch.MANIFEST, arch.BODIES)
    assert envoy.EnvoyServer.replays is True
    envoy.EnvoyServer.check_replay("h3-envoy")  # not refused


def test_one_filter_chain_per_origin_chosen_by_server_name(tmp_path: Path) -> None:
    a = three_origins(tmp_path / "pages")
    cfg = _config(tmp_path, a)
    listener = cfg["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"] == {
        "protocol": "UDP",
        "address": "0.0.0.0",
        "port_value": 4433,
    }
    chains = _chains(cfg)
    assert [c["filter_chain_match"] for c in chains] == [{"server_names": [h]} for h in ORIGINS]
    for host, chain in zip(ORIGINS, chains, strict=True):
        ts = chain["transport_socket"]["typed_config"]
        assert ts["enable_early_data"] is True
        ctx = ts["downstream_tls_context"]["common_tls_context"]
        assert ctx["tls_certificates"] == [
            {
                "certificate_chain": {"filename": f"/tls/{host}.pem"},
                "private_key": {"filename": "/tls/server.key"},
            }
        ]
        assert ctx["alpn_protocols"] == ["h3"]
        hcm = _hcm(chain)
        assert hcm["server_header_transformation"] == "PASS_THROUGH"
        assert hcm["codec_type"] == "HTTP3"
        # :path is matched as sent: no normalisation of any kind
        assert (hcm["normalize_path"], hcm["merge_slashes"]) == (False, False)
        assert hcm["path_with_escaped_slashes_action"] == "KEEP_UNCHANGED"
        log = hcm["access_log"][0]["typed_config"]
        assert log["path"] == str(tmp_path / "logs" / "h3-envoy.envoy-access.jsonl")
        fields = log["log_format"]["json_format"]
        assert fields["replay"] == "%RESP(X-QUICBED-REPLAY)%" and fields["conn"]
        # each origin's virtual host in its own chain's route configuration, and any
        # other authority answered "none"
        hosts = hcm["route_config"]["virtual_hosts"]
        assert [v["domains"] for v in hosts] == [[host, f"{host}:443"], ["*"]]
        assert [r["name"] for r in hosts[1]["routes"]] == ["none"]
        # the recorded headers need no undoing: no filter but the router
        assert [f["name"] for f in hcm["http_filters"]] == ["envoy.filters.http.router"]


def test_routes_follow_the_matching_rule_in_order(tmp_path: Path) -> None:
    a = three_origins(tmp_path / "pages")
    img = _hcm(_chains(_config(tmp_path, a))[2])["route_config"]
    routes = img["virtual_hosts"][0]["routes"]
    base = f"https://{ORIGINS[2]}"
    assert [r["name"] for r in routes] == [
        f"url GET {base}/bg.png",
        f"url GET {base}/a.png",
        f"path GET {base}/bg.png",
        f"path GET {base}/a.png",
        "none",
    ]
    method = {"name": ":method", "string_match": {"exact": "GET"}}
    any_query = {"name": ":path", "string_match": {"safe_regex": {"regex": r"[^?]*\??"}}}
    assert routes[0]["match"] == {"path": "/bg.png", "headers": [method, any_query]}
    assert routes[2]["match"] == {"path": "/bg.png", "headers": [method]}
    folder = tmp_path / "pages" / "t3" / "bodies"
    entry = a.origins[2].entries[1]
    for r in (routes[1], routes[3]):
        assert r["direct_response"] == {
            "status": 200,
            "body": {"filename": str(folder / entry.body)},
        }
    overwrite = "OVERWRITE_IF_EXISTS_OR_ADD"
    assert _headers(routes[1]) == [
        ("content-type", "image/png", overwrite),
        ("cache-control", "max-age=60", overwrite),
        (REPLAY_HEADER, "url", overwrite),
    ]
    assert _headers(routes[3])[-1] == (REPLAY_HEADER, "path", overwrite)
    assert routes[-1] == {
        "name": "none",
        "match": {"prefix": "/"},
        "direct_response": {"status": 404},  # no body
        "response_headers_to_add": [
            {"header": {"key": REPLAY_HEADER, "value": "none"}, "append_action": overwrite}
        ],
    }
    # bodies under Envoy's default limit: the limit stays at it
    assert img["max_direct_response_body_size_bytes"] == envoy_config.MIN_BODY_LIMIT


def _corner_archive(store: Path) -> Archive:
    """One origin whose entries Envoy's local reply would change, a request target
    with a query recorded twice, a header recorded twice, and a large body."""
    www = "https://www.c.example"
    bodies: dict[str, bytes] = {}

    def e(path: str, body: bytes, status: int = 200, **kw: Any) -> Entry:
        sha = hashlib.sha256(body).hexdigest()
        bodies[sha] = body
        return Entry(url=www + path, status=status, body=sha, size=len(body), **kw)

    html = (("content-type", "text/html"), ("link", "</a.css>; rel=preload"))
    a = Archive(
        name="corners",
        main=f"{www}/",
        origins=(
            Origin(
                origin=www,
                host="www.c.example",
                entries=(
                    e("/", b"<html></html>", method="GET", headers=(*html, ("link", "</b.js>"))),
                    e("/big.bin", b"\1" * 10000, method="GET", headers=()),
                    e("/empty.css", b"", method="GET", headers=(("content-type", "text/css"),)),
                    e("/old", b"", 301, method="GET", headers=(("location", "/"),)),
                    e("/gone", b"", 302, method="GET"),
                    e("/q?a=1", b"one", method="GET"),
                    e("/q?a=1", b"again", method="GET"),  # never served: the first is
                    e("/q?a=2", b"two", method="POST"),
                ),
            ),
        ),
    )
    arch.save(a, bodies, store / a.name)
    return a


def test_recorded_headers_are_served_as_recorded_whatever_envoy_would_add(
    tmp_path: Path,
) -> None:
    a = _corner_archive(tmp_path / "pages")
    hcm = _hcm(_chains(_config(tmp_path, a))[0])
    rc = hcm["route_config"]
    by_name = {r["name"]: r for r in rc["virtual_hosts"][0]["routes"]}
    www = "https://www.c.example"
    assert list(by_name) == [
        *(f"url {m} {www}{p}" for m, p in [("GET", "/"), ("GET", "/big.bin")]),
        *(f"url GET {www}{p}" for p in ("/empty.css", "/old", "/gone", "/q?a=1")),
        f"url POST {www}/q?a=2",
        *(f"path GET {www}{p}" for p in ("/", "/big.bin", "/empty.css", "/old", "/gone")),
        f"path GET {www}/q?a=1",
        f"path POST {www}/q?a=2",
        "none",
    ]
    # a request target with its query: exact; the method is the recorded one
    assert by_name[f"url POST {www}/q?a=2"]["match"] == {
        "path": "/q",
        "headers": [
            {"name": ":method", "string_match": {"exact": "POST"}},
            {"name": ":path", "string_match": {"exact": "/q?a=2"}},
        ],
    }
    # a name recorded twice: its first value replaces Envoy's, the second is added
    assert [(k, act) for k, _, act in _headers(by_name[f"url GET {www}/"])] == [
        ("content-type", "OVERWRITE_IF_EXISTS_OR_ADD"),
        ("link", "OVERWRITE_IF_EXISTS_OR_ADD"),
        ("link", "APPEND_IF_EXISTS_OR_ADD"),
        (REPLAY_HEADER, "OVERWRITE_IF_EXISTS_OR_ADD"),
    ]

    def fixes(name: str) -> list[dict[str, Any]] | None:
        per = by_name[name].get("typed_per_filter_config")
        if per is None:
            return None
        got: list[dict[str, Any]] = per[envoy_config.HEADER_MUTATION]["mutations"][
            "response_mutations"
        ]
        return got

    # Envoy's local reply adds text/plain to a body without a type, drops the type of
    # an empty body, adds a location to a 3xx: each undone on that route alone
    assert fixes(f"url GET {www}/big.bin") == [{"remove": "content-type"}]
    assert fixes(f"url GET {www}/empty.css") == [
        {
            "append": {
                "header": {"key": "content-type", "value": "text/css"},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            }
        }
    ]
    assert fixes(f"url GET {www}/gone") == [{"remove": "location"}]
    assert fixes(f"url GET {www}/old") is None and fixes(f"url GET {www}/") is None
    assert [f["name"] for f in hcm["http_filters"]] == [
        envoy_config.HEADER_MUTATION,
        "envoy.filters.http.router",
    ]
    # empty bodies are no file; the limit admits the largest body
    assert by_name[f"url GET {www}/gone"]["direct_response"] == {"status": 302}
    assert rc["max_direct_response_body_size_bytes"] == 10000


def test_what_envoy_cannot_serve_is_refused_by_name(tmp_path: Path) -> None:
    a = _corner_archive(tmp_path / "pages")
    srv = _server(tmp_path, _serve(tmp_path / "pages" / a.name, a))
    s = srv.settings()
    assert envoy_config.answer([json.dumps(s)]) == {
        "config": str(tmp_path / "logs" / "h3-envoy.envoy.json"),
        "routes": 15,
        "origins": 1,
    }
    manifest = tmp_path / "pages" / a.name / arch.MANIFEST
    raw = json.loads(manifest.read_text())

    def refused(change: dict[str, Any]) -> str:
        entry = {**raw["origins"][0]["entries"][0], **change}
        manifest.write_text(
            json.dumps({**raw, "origins": [{**raw["origins"][0], "entries": [entry]}]})
        )
        return str(envoy_config.answer([json.dumps(s)])["error"])

    assert "https://www.c.example/: Envoy's direct_response cannot answer 103" in refused(
        {"status": 103}
    )
    assert "a 204 has no body, and this one has" in refused({"status": 204})
    assert "header x-a has a line break or NUL" in refused({"headers": [["x-a", "1\r\n2"]]})
    manifest.write_text(json.dumps(raw))
    other = {**s["replay"], "origins": [{"host": "www.d.example", "cert": "/c.pem"}]}
    got = envoy_config.answer([json.dumps({**s, "replay": other})])["error"]
    assert "www.d.example is not an origin of" in got


def _answered(cfg: dict[str, Any], method: str, url: str) -> dict[str, Any] | None:
    """The route Envoy answers ``method url`` with, by its rules as envoy_config's
    docstring states them (checked against Envoy 1.40 itself): the filter chain by the
    server name, the virtual host by the authority (case-insensitive, exact domains
    before ``*``), the first route whose ``path`` (the :path up to ``?``) or ``prefix``
    and header matchers (``exact``, or a ``safe_regex`` that must match the whole
    value) all hold. None: no chain, no handshake."""
    sent = url.split("#", 1)[0]  # the browser never sends the fragment
    u = urlsplit(sent)
    rest = sent[len("https://") :]
    target = rest[rest.index("/") :] if "/" in rest else "/"
    host = (u.hostname or "").lower()
    chain = next((c for c in _chains(cfg) if host in c["filter_chain_match"]["server_names"]), None)
    if chain is None:
        return None
    vhosts = _hcm(chain)["route_config"]["virtual_hosts"]
    authority = u.netloc.lower()
    vhost = next(
        (v for v in vhosts if authority in v["domains"]),
        next(v for v in vhosts if "*" in v["domains"]),
    )
    request = {":method": method, ":path": target}
    for r in vhost["routes"]:
        m = r["match"]
        if "path" in m and m["path"] != target.split("?", 1)[0]:
            continue
        if "prefix" in m and not target.startswith(m["prefix"]):
            continue
        ok = True
        for h in m.get("headers", []):
            sm, value = h["string_match"], request[h["name"]]
            if "exact" in sm:
                ok = ok and value == sm["exact"]
            else:
                ok = ok and re.fullmatch(sm["safe_regex"]["regex"], value) is not None
        if ok:
            return dict(r)
    return None


def _table_cases() -> list[dict[str, Any]]:
    """The shared cases a testbed can meet: quicbed serves every origin on 443."""
    cases = json.loads(TABLE.read_text())["cases"]
    return [c for c in cases if urlsplit(c["url"]).port in (None, 443)]


@pytest.mark.parametrize("case", _table_cases(), ids=[c["name"] for c in _table_cases()])
def test_the_routes_answer_the_shared_matching_table(case: dict[str, Any], tmp_path: Path) -> None:
    """Each case of tests/data/replay/match-cases.json, which quic-go's matcher and the
    Python rule pass, answered by the generated routes: the case's entry's body and how
    it matched, or ``none``."""
    raw = json.loads(TABLE.read_text())["archive"]
    folder = tmp_path / "pages" / raw["name"]
    folder.mkdir(parents=True)
    (folder / arch.MANIFEST).write_text(json.dumps(raw))  # bodies are not read
    a = Archive.model_validate(raw)
    cfg = _config(tmp_path, a)
    route = _answered(cfg, case["method"], case["url"])
    how = None if route is None else dict((k, v) for k, v, _ in _headers(route))[REPLAY_HEADER]
    if case["entry"] is None:
        assert how in (None, "none"), route
        return
    assert route is not None and how == case["match"], route
    found = a.match(case["method"], case["entry"])
    assert found is not None
    want = str(folder / arch.BODIES / found[0].body)
    assert route["direct_response"]["body"]["filename"] == want


def test_the_browsers_sessions_are_read_on_the_origins_port(tmp_path: Path) -> None:
    """The browser reaches every origin as host:443 (its host map sends that to the
    arm's port), so that is the port its NetLog names; without a replay, the arm's."""
    a = three_origins(tmp_path / "pages")
    assert _server(tmp_path, _serve(tmp_path / "pages" / a.name, a)).netlog_port() == 443
    assert _server(tmp_path, None).netlog_port() == 4433


def test_access_log_counts_how_each_request_matched() -> None:
    rec = {"proto": "HTTP/3", "conn": 1, "status": 200, "tls": "TLSv1.3", "early": "1"}

    def line(conn: int, how: str | None) -> str:
        return json.dumps({**rec, "conn": conn, "replay": how})

    f = envoy.access_facts([line(1, "url"), line(1, "path"), line(2, "url"), line(2, None)])
    assert f["server_replay"] == {"url": 2, "path": 1, "unmarked": 1}
    assert f["server_connections"] == 2 and f["server_early_connections"] == 2
    assert "server_replay" not in envoy.access_facts([json.dumps(rec)])  # a page tree's


@pytest.mark.built
def test_envoy_itself_accepts_a_replay_config(tmp_path: Path) -> None:
    """Envoy's own validation of a replayed page's configuration (the per-route header
    mutation, the regex, the chains by server name), on real certificates."""
    from quicbed import certs

    a = _corner_archive(tmp_path / "pages")
    b = three_origins(tmp_path / "pages", waits=WAITS)  # with server times (fault filter)
    hosts = [o.host for o in (*a.origins, *b.origins)]
    pki = certs.ensure(tmp_path / "tls", ["test.quicbed"], ["10.10.1.1"], hosts)
    for archive in (a, b):
        serve = _serve(tmp_path / "pages" / archive.name, archive, pki.origin_certs)
        serve = dataclasses.replace(serve, wait=archive is b)
        s = {
            **_server(tmp_path, serve).settings(),
            "key": str(pki.key),
            "access_log": str(tmp_path / "access.jsonl"),
            "out": str(tmp_path / f"{archive.name}.json"),
        }
        assert "error" not in envoy_config.answer([json.dumps(s)])
        cp = subprocess.run(
            [str(envoy.ENVOY), "--mode", "validate", "-c", s["out"], "--disable-hot-restart"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cp.returncode == 0 and "OK" in cp.stdout, cp.stdout + cp.stderr


def test_a_recorded_server_time_is_a_per_route_delay_only_when_asked(tmp_path: Path) -> None:
    """With the cell's server time on, each route whose entry recorded one holds its
    requests that long by Envoy's fault filter (per route; the filter injects nothing
    of its own), by URL and by path alike; off, no route and no chain has a fault."""
    a = three_origins(tmp_path / "pages", waits=WAITS)
    serve = _serve(tmp_path / "pages" / a.name, a)
    for wait in (False, True):
        srv = _server(tmp_path, dataclasses.replace(serve, wait=wait))
        cfg = envoy_config.config(srv.settings())
        delays: dict[str, str] = {}
        for chain in _chains(cfg):
            hcm = _hcm(chain)
            names = [f["name"] for f in hcm["http_filters"]]
            assert names[-1] == "envoy.filters.http.router"
            for r in hcm["route_config"]["virtual_hosts"][0]["routes"]:
                fault = r.get("typed_per_filter_config", {}).get(envoy_config.FAULT)
                if fault is not None:
                    assert envoy_config.FAULT in names, names
                    assert fault["delay"]["percentage"] == {
                        "numerator": 100,
                        "denominator": "HUNDRED",
                    }
                    delays[r["name"]] = fault["delay"]["fixed_delay"]
            assert (envoy_config.FAULT in names) is wait, names
        if not wait:
            assert delays == {}
            continue
        www, css, bg = list(WAITS)
        assert delays == {
            f"url GET {www}": "0.150000s",
            f"path GET {www}": "0.150000s",
            f"url GET {css}": "0.060000s",
            f"path GET {css}": "0.060000s",
            f"url GET {bg}": "0.080000s",
            f"path GET {bg}": "0.080000s",
        }
