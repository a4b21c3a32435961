"""Envoy's configuration for one ``h3-envoy`` arm, made on the server from a cell's tree
or a replayed page's archive.

Envoy has no static file server. What keeps its work the same as the other servers'
is a route per file of the tree with a ``direct_response`` whose body is that file:
Envoy reads every body into memory when it loads the configuration (as Google QUICHE's
``quic_server`` does with its memory cache, quicbed.servers.gquiche_cache), and a
request is answered from memory with no upstream, no proxying and no filter but the
router. The headers are quicbed's other servers' (go/internal/docroot/handler.go, the
apache_h2 role): ``cache-control: no-store, no-cache``, ``content-type`` by extension
as Apache's defaults give it, ``content-length``; Envoy's own ``server`` header is not
sent (``server_header_transformation: PASS_THROUGH`` with none to pass), and Envoy
adds a ``date`` like Apache and Go. No ETag, no Last-Modified, no Alt-Svc.

``<page>/`` and ``<page>/index.html`` both answer with the page; any other path is a
404 from Envoy's router (no route).

**A replayed page** (settings ``replay``; docs/replay.md): one UDP listener on the
unspecified address and the arm's port, and one filter chain per origin, chosen by the
TLS server name (``filter_chain_match.server_names``) and holding that origin's
certificate (all on the one key). Each chain's connection manager has its own route
configuration, with the origin's virtual host (``host`` and ``host:443``) and a
catch-all one for any other ``:authority``, so each recorded body is read into memory
once (a route configuration every chain carried inline would be read once per chain).
An origin's routes follow the matching rule, each a ``direct_response`` of the
recorded status, body (``bodies/SHA256``) and headers (``response_headers_to_add``: a
name's first value overwrites, its later ones are added), with ``x-quicbed-replay``:

1. ``url``: per recorded request (the first of a method and target recorded twice),
   its ``path`` and header matchers on ``:method`` and ``:path``: exact on the recorded
   target (path and query); for an entry recorded without a query, the path with an
   optional ``?`` (an empty query is no query);
2. ``path``: per method and path, the first recorded entry, matched by ``path``, which
   compares the ``:path`` up to its ``?`` and ignores the query;
3. ``none``: anything else, ``404`` with an empty body.

**Server time** (settings ``replay.wait``: a cell's ``server_time``): a route whose entry
recorded a server time (``wait_ms``) delays its answer that long with Envoy's fault
filter (``envoy.filters.http.fault``, a per-route ``fixed_delay`` for every request;
the filter's own configuration injects nothing), which runs before the router sends
the direct response.

**How Envoy treats ``:path``** (Envoy 1.40; set explicitly here, although these are its
defaults): no RFC 3986 normalisation (``normalize_path: false``: dot segments stay,
percent-encodings are neither decoded nor case-folded), adjacent slashes are not merged
(``merge_slashes: false``), an encoded slash stays as sent
(``path_with_escaped_slashes_action: KEEP_UNCHANGED``); and route matching is case
sensitive and byte for byte. So ``:path`` is matched as the browser sent it, as the
matching rule wants (Apache reads the raw request line, quic-go the raw target). A
``:path`` with a fragment Envoy refuses with 400 (its runtime guard
``http_reject_path_with_fragment``, on by default; browsers never send one). The host
is matched case-insensitively, as the rule wants. Checked by hand against Envoy 1.40
over HTTP/3 with the requests of the shared matching table
(tests/data/replay/match-cases.json), which tests/test_envoy_replay.py runs against
the generated routes by these rules.

**Where Envoy's answer differs from the recording**, as a local reply
(Http::Utility::prepareLocalReply, router.cc): it adds ``content-type: text/plain`` to
a body served without one, drops ``content-type`` (and ``content-length``) where the
body is empty, and adds ``location`` to a 201 or 3xx. A route whose entry is one of
these gets the ``header_mutation`` filter's per-route mutation, which runs on the reply
after Envoy's own headers (a local reply passes every encoder filter): the recorded
headers are what the browser gets (checked by hand as above). A status
Envoy's ``direct_response`` cannot send (1xx), a body on a 204 or 304, and a header
value with a line break or NUL are refused by name, as quicbed-h3server refuses them.

Runs on the server node, where the tree is (``python3 -m quicbed.servers.envoy_config
SETTINGS_JSON``): standard library only, like every module a node runs (a replay reads
the archive's manifest with :mod:`json`). The settings (addresses, files, QUIC
options) come from quicbed.servers.envoy; this module only lays them out as Envoy's v3
API wants them, so what each field does is said there.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# the headers every quicbed server sends, as quic_server's cache writes them
from quicbed.servers.gquiche_cache import CACHE_CONTROL, CONTENT_TYPES, DEFAULT_TYPE, INDEX

#: what the access log records per request (Envoy's command operators): one JSON
#: object per line, read back by quicbed.servers.envoy.load_facts
ACCESS_LOG_FIELDS = {
    "t": "%START_TIME(%s.%6f)%",
    "proto": "%PROTOCOL%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(:PATH)%",
    "status": "%RESPONSE_CODE%",
    "bytes": "%BYTES_SENT%",
    "conn": "%CONNECTION_ID%",
    "remote": "%DOWNSTREAM_REMOTE_ADDRESS%",
    "tls": "%DOWNSTREAM_TLS_VERSION%",
    "cipher": "%DOWNSTREAM_TLS_CIPHER%",
    "duration_ms": "%DURATION%",
    # Envoy adds "early-data: 1" to a request decoded before the handshake completed
    # (ConnectionManagerUtility::mutateRequestHeaders): the request came in 0-RTT
    "early": "%REQ(EARLY-DATA)%",
    # the stream's retransmitted packets and bytes (QuicStatsGatherer)
    "retx_packets": "%PACKETS_RETRANSMITTED%",
    "retx_bytes": "%BYTES_RETRANSMITTED%",
}

#: what the access log also records per request of a replayed page: the authority and
#: server name it came with, the address it came to, the route that answered it and how
#: it matched
REPLAY_LOG_FIELDS = {
    "host": "%REQ(:AUTHORITY)%",
    "sni": "%REQUESTED_SERVER_NAME%",
    "local": "%DOWNSTREAM_LOCAL_ADDRESS%",
    "route": "%ROUTE_NAME%",
    # DI: the fault filter held the request (a recorded server time)
    "flags": "%RESPONSE_FLAGS%",
    "replay": "%RESP(X-QUICBED-REPLAY)%",
}

#: the response header every replay server adds, how the request matched: restated
#: from quicbed.replay.archive.REPLAY_HEADER (this module imports nothing beyond the
#: standard library; tests/test_envoy_replay.py holds the two equal)
REPLAY_HEADER = "x-quicbed-replay"
#: an archive's manifest and bodies (quicbed.replay.archive.MANIFEST, BODIES)
MANIFEST = "archive.json"
BODIES = "bodies"
#: the smallest body-size limit a route configuration gets (Envoy's default is 4096)
MIN_BODY_LIMIT = 4096
HEADER_MUTATION = "envoy.filters.http.header_mutation"
FAULT = "envoy.filters.http.fault"
_FAULT_TYPE = "extensions.filters.http.fault.v3.HTTPFault"
#: a ``:path`` whose path part ``path`` matched, with no query or an empty one (RE2,
#: matched whole)
ANY_QUERY = r"[^?]*\??"

_ANY = "type.googleapis.com/envoy."
_OVERWRITE = "OVERWRITE_IF_EXISTS_OR_ADD"
_APPEND = "APPEND_IF_EXISTS_OR_ADD"


def files(docroot: Path) -> list[tuple[str, Path, int]]:
    """(URL path, file, size) of every file below ``docroot``, sorted by URL path."""
    out = []
    for dirpath, _dirs, names in os.walk(docroot):
        for name in names:
            f = Path(dirpath) / name
            rel = f.relative_to(docroot).as_posix()
            out.append(("/" + rel, f, f.stat().st_size))
    return sorted(out)


def route(path: str, file: Path) -> dict[str, Any]:
    ctype = CONTENT_TYPES.get(file.suffix.lower(), DEFAULT_TYPE)
    return {
        "match": {"path": path},
        "direct_response": {"status": 200, "body": {"filename": str(file)}},
        "response_headers_to_add": [
            {
                "header": {"key": "content-type", "value": ctype},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            },
            {
                "header": {"key": "cache-control", "value": CACHE_CONTROL},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            },
        ],
    }


def routes(docroot: Path) -> tuple[list[dict[str, Any]], int]:
    """A route per file (and ``<page>/`` for each ``<page>/index.html``), and the
    largest body, which Envoy's body-size limit must admit."""
    out = []
    largest = 0
    for path, f, size in files(docroot):
        largest = max(largest, size)
        out.append(route(path, f))
        if f.name == INDEX:
            out.append(route(path[: -len(INDEX)], f))
    return out, largest


# --- a replayed page ---------------------------------------------------------------------
def _header(name: str, value: str, action: str = _OVERWRITE) -> dict[str, Any]:
    return {"header": {"key": name, "value": value}, "append_action": action}


def _target(url: str) -> tuple[str, str]:
    """``(path, query)`` of a recorded URL as the browser sends it (the path at least
    ``/``, the fragment dropped), as quicbed.replay.archive.split_url has them."""
    u = urlsplit(url)
    return u.path or "/", u.query


def _entry_headers(e: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded headers as ``response_headers_to_add``: a name's first value replaces
    any Envoy set, its later ones are added beside it (two ``link``s stay two)."""
    out, seen = [], set()
    for name, value in e.get("headers") or []:
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"{e['url']}: header {name} has a line break or NUL")
        out.append(_header(name, value, _APPEND if name in seen else _OVERWRITE))
        seen.add(name)
    return out


def _local_reply_fixes(e: dict[str, Any]) -> list[dict[str, Any]]:
    """What Envoy's local reply changes in this entry's headers, undone (module
    docstring): ``header_mutation`` response mutations, none where nothing changes."""
    recorded = {n: v for n, v in reversed(e.get("headers") or [])}  # each name's first
    fixes: list[dict[str, Any]] = []
    if e["size"] > 0 and "content-type" not in recorded:
        fixes.append({"remove": "content-type"})
    if e["size"] == 0 and "content-type" in recorded:
        fixes.append({"append": _header("content-type", recorded["content-type"])})
    if (e["status"] == 201 or 300 <= e["status"] < 400) and "location" not in recorded:
        fixes.append({"remove": "location"})
    return fixes


def _delay(wait_ms: float) -> dict[str, Any]:
    """The fault filter's per-route configuration that holds every request ``wait_ms``."""
    return {
        "@type": _ANY + _FAULT_TYPE,
        "delay": {
            "fixed_delay": f"{wait_ms / 1000:.6f}s",
            "percentage": {"numerator": 100, "denominator": "HUNDRED"},
        },
    }


def replay_route(e: dict[str, Any], how: str, folder: Path, wait: bool = False) -> dict[str, Any]:
    """The route that answers entry ``e`` (archive.json's form) as the matching rule's
    ``how`` (``url`` or ``path``); with ``wait``, after its recorded server time."""
    if not 200 <= e["status"] < 600:
        raise ValueError(f"{e['url']}: Envoy's direct_response cannot answer {e['status']}")
    if e["status"] in (204, 304) and e["size"] > 0:
        raise ValueError(f"{e['url']}: a {e['status']} has no body, and this one has")
    path, query = _target(e["url"])
    method = {"name": ":method", "string_match": {"exact": e["method"]}}
    match: dict[str, Any] = {"path": path, "headers": [method]}
    if how == "url":  # recorded without a query: no query, or an empty one
        target = {"exact": f"{path}?{query}"} if query else {"safe_regex": {"regex": ANY_QUERY}}
        match["headers"].append({"name": ":path", "string_match": target})
    response: dict[str, Any] = {"status": e["status"]}
    if e["size"] > 0:
        response["body"] = {"filename": str(folder / BODIES / e["body"])}
    out: dict[str, Any] = {
        "name": f"{how} {e['method']} {e['url']}",
        "match": match,
        "direct_response": response,
        "response_headers_to_add": [*_entry_headers(e), _header(REPLAY_HEADER, how)],
    }
    per_filter: dict[str, Any] = {}
    fixes = _local_reply_fixes(e)
    if fixes:
        per_filter[HEADER_MUTATION] = {
            "@type": _ANY + "extensions.filters.http.header_mutation.v3.HeaderMutationPerRoute",
            "mutations": {"response_mutations": fixes},
        }
    if wait and e.get("wait_ms"):
        per_filter[FAULT] = _delay(float(e["wait_ms"]))
    if per_filter:
        out["typed_per_filter_config"] = per_filter
    return out


def not_found() -> dict[str, Any]:
    """The matching rule's last step: 404 with an empty body, marked ``none``."""
    return {
        "name": "none",
        "match": {"prefix": "/"},
        "direct_response": {"status": 404},
        "response_headers_to_add": [_header(REPLAY_HEADER, "none")],
    }


def replay_routes(
    origin: dict[str, Any], folder: Path, wait: bool = False
) -> tuple[list[dict[str, Any]], int]:
    """One origin's routes in the matching rule's order (module docstring), and its
    largest body (``wait``: each after its entry's recorded server time)."""
    exact, by_path = [], {}
    seen: set[tuple[str, str, str]] = set()
    for e in origin["entries"]:
        path, query = _target(e["url"])
        if (e["method"], path, query) in seen:
            continue  # a later recording of the same request is never served
        seen.add((e["method"], path, query))
        exact.append(replay_route(e, "url", folder, wait))
        if (e["method"], path) not in by_path:
            by_path[(e["method"], path)] = replay_route(e, "path", folder, wait)
    largest = max((e["size"] for e in origin["entries"]), default=0)
    return [*exact, *by_path.values(), not_found()], largest


def replay_route_config(origin: dict[str, Any], folder: Path, wait: bool = False) -> dict[str, Any]:
    """One origin's route configuration: its virtual host, and any other authority
    answered ``none``."""
    rts, largest = replay_routes(origin, folder, wait)
    host = origin["host"]
    return {
        "name": host,
        "max_direct_response_body_size_bytes": max(largest, MIN_BODY_LIMIT),
        "virtual_hosts": [
            {"name": host, "domains": [host, f"{host}:443"], "routes": rts},
            {"name": "unknown-authority", "domains": ["*"], "routes": [not_found()]},
        ],
    }


def _archive(replay: dict[str, Any]) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The archive's folder on this node and its origins on port 443 by host (the only
    ones quicbed serves: quicbed.replay.serve.checked)."""
    folder = Path(replay["archive"])
    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest.get("format") != 1:
        raise ValueError(f"{folder / MANIFEST}: format {manifest.get('format')!r}, not 1")
    return folder, {o["host"]: o for o in manifest["origins"] if o.get("port", 443) == 443}


# --- the bootstrap ------------------------------------------------------------------------
def _tls(cert: str, key: str) -> dict[str, Any]:
    return {
        "common_tls_context": {
            "tls_params": {
                "tls_minimum_protocol_version": "TLSv1_3",
                "tls_maximum_protocol_version": "TLSv1_3",
            },
            "tls_certificates": [
                {
                    "certificate_chain": {"filename": cert},
                    "private_key": {"filename": key},
                }
            ],
            "alpn_protocols": ["h3"],
        }
    }


def _hcm(
    s: dict[str, Any],
    route_config: dict[str, Any],
    log_fields: dict[str, str],
    extra: dict[str, Any] | None = None,
    filters: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    return {
        "@type": _ANY + "extensions.filters.network.http_connection_manager.v3"
        ".HttpConnectionManager",
        "codec_type": "HTTP3",
        "stat_prefix": "h3",
        "server_header_transformation": "PASS_THROUGH",
        **(extra or {}),
        "http3_protocol_options": {"quic_protocol_options": s.get("quic_protocol_options", {})},
        "access_log": [
            {
                "name": "envoy.access_loggers.file",
                "typed_config": {
                    "@type": _ANY + "extensions.access_loggers.file.v3.FileAccessLog",
                    "path": s["access_log"],
                    "log_format": {"json_format": log_fields},
                },
            }
        ],
        "route_config": route_config,
        "http_filters": [
            *filters,
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _ANY + "extensions.filters.http.router.v3.Router"},
            },
        ],
    }


def _chain(
    tls: dict[str, Any], hcm: dict[str, Any], server_names: list[str] | None = None
) -> dict[str, Any]:
    return {
        **({"filter_chain_match": {"server_names": server_names}} if server_names else {}),
        "transport_socket": {
            "name": "envoy.transport_sockets.quic",
            "typed_config": {
                "@type": _ANY + "extensions.transport_sockets.quic.v3.QuicDownstreamTransport",
                "enable_early_data": True,
                "downstream_tls_context": tls,
            },
        },
        "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}],
    }


#: the connection manager's handling of ``:path`` for a replayed page (module docstring)
REPLAY_PATHS = {
    "normalize_path": False,
    "merge_slashes": False,
    "path_with_escaped_slashes_action": "KEEP_UNCHANGED",
}


def _tree_chains(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The cell's tree: one chain, one certificate, a route per file."""
    rts, largest = routes(Path(s["docroot"]))
    if not rts:
        raise ValueError(f"no file below {s['docroot']}")
    route_config = {
        "name": "quicbed",
        "max_direct_response_body_size_bytes": max(largest, MIN_BODY_LIMIT),
        "virtual_hosts": [{"name": "quicbed", "domains": ["*"], "routes": rts}],
    }
    return [_chain(_tls(s["cert"], s["key"]), _hcm(s, route_config, ACCESS_LOG_FIELDS))]


def _replay_chains(s: dict[str, Any]) -> list[dict[str, Any]]:
    """A replayed page: per origin, a chain by server name with its certificate."""
    replay = s["replay"]
    folder, by_host = _archive(replay)
    if not replay["origins"]:
        raise ValueError("a replay with no origins")
    mutation = {
        "name": HEADER_MUTATION,
        "typed_config": {
            "@type": _ANY + "extensions.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {},
        },
    }
    # injects nothing of its own: each route with a server time sets its delay
    fault = {"name": FAULT, "typed_config": {"@type": _ANY + _FAULT_TYPE}}
    chains = []
    for served in replay["origins"]:
        origin = by_host.get(served["host"])
        if origin is None:
            raise ValueError(f"{served['host']} is not an origin of {folder / MANIFEST}")
        rc = replay_route_config(origin, folder, bool(replay.get("wait")))
        per_route = [r.get("typed_per_filter_config", {}) for r in rc["virtual_hosts"][0]["routes"]]
        # the filters some route configures (the mutation acts on the reply, the fault on
        # the request: their order changes nothing)
        filters = [f for f in (mutation, fault) if any(f["name"] in p for p in per_route)]
        hcm = _hcm(
            s,
            rc,
            {**ACCESS_LOG_FIELDS, **REPLAY_LOG_FIELDS},
            REPLAY_PATHS,
            tuple(filters),
        )
        chains.append(_chain(_tls(served["cert"], s["key"]), hcm, [served["host"]]))
    return chains


def config(s: dict[str, Any]) -> dict[str, Any]:
    """Envoy's bootstrap for settings ``s`` (quicbed.servers.envoy.EnvoyServer.settings):
    the cell's tree, or with ``replay`` a replayed page."""
    chains = _replay_chains(s) if s.get("replay") else _tree_chains(s)
    listener = {
        "name": "h3",
        "address": {
            "socket_address": {
                "protocol": "UDP",
                "address": s["address"],
                "port_value": s["port"],
            }
        },
        "udp_listener_config": {"quic_options": s.get("quic_options", {})},
        "filter_chains": chains,
    }
    out: dict[str, Any] = {
        "node": {"id": "quicbed", "cluster": "quicbed"},
        "static_resources": {"listeners": [listener]},
    }
    if s.get("runtime"):  # QUICHE's reloadable flags, among others
        out["layered_runtime"] = {
            "layers": [{"name": "quicbed", "static_layer": dict(s["runtime"])}]
        }
    return out


def answer(argv: list[str]) -> dict[str, Any]:
    """``SETTINGS_JSON`` -> the configuration written to the settings' ``out`` (``error``:
    why not). The local testbed calls this in its own process."""
    if len(argv) != 1:
        return {"error": "usage: python3 -m quicbed.servers.envoy_config SETTINGS_JSON"}
    try:
        s = json.loads(argv[0])
        cfg = config(s)
        Path(s["out"]).parent.mkdir(parents=True, exist_ok=True)
        Path(s["out"]).write_text(json.dumps(cfg, indent=1))
    except (OSError, ValueError, KeyError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    chains = cfg["static_resources"]["listeners"][0]["filter_chains"]
    configs = [c["filters"][0]["typed_config"]["route_config"] for c in chains]
    n = len(configs[0]["virtual_hosts"][0]["routes"])
    if not s.get("replay"):
        return {"config": s["out"], "routes": n}
    # a replayed page: each origin's own routes (its catch-all host's not counted)
    n = sum(len(rc["virtual_hosts"][0]["routes"]) for rc in configs)
    return {"config": s["out"], "routes": n, "origins": len(chains)}


def main(argv: list[str]) -> int:
    out = answer(argv)
    print(json.dumps(out))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
