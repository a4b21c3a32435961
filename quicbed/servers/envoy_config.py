"""Envoy's configuration for one ``h3-envoy`` arm, made on the server from a cell's tree.

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

Runs on the server node, where the tree is (``python3 -m quicbed.servers.envoy_config
SETTINGS_JSON``): standard library only, like every module a node runs. The settings
(addresses, files, QUIC options) come from quicbed.servers.envoy; this module only
lays them out as Envoy's v3 API wants them, so what each field does is said there.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

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

_ANY = "type.googleapis.com/envoy."


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


def config(s: dict[str, Any]) -> dict[str, Any]:
    """Envoy's bootstrap for settings ``s`` (quicbed.servers.envoy.EnvoyServer.settings)."""
    rts, largest = routes(Path(s["docroot"]))
    if not rts:
        raise ValueError(f"no file below {s['docroot']}")
    tls = {
        "common_tls_context": {
            "tls_params": {
                "tls_minimum_protocol_version": "TLSv1_3",
                "tls_maximum_protocol_version": "TLSv1_3",
            },
            "tls_certificates": [
                {
                    "certificate_chain": {"filename": s["cert"]},
                    "private_key": {"filename": s["key"]},
                }
            ],
            "alpn_protocols": ["h3"],
        }
    }
    hcm = {
        "@type": _ANY + "extensions.filters.network.http_connection_manager.v3"
        ".HttpConnectionManager",
        "codec_type": "HTTP3",
        "stat_prefix": "h3",
        "server_header_transformation": "PASS_THROUGH",
        "http3_protocol_options": {"quic_protocol_options": s.get("quic_protocol_options", {})},
        "access_log": [
            {
                "name": "envoy.access_loggers.file",
                "typed_config": {
                    "@type": _ANY + "extensions.access_loggers.file.v3.FileAccessLog",
                    "path": s["access_log"],
                    "log_format": {"json_format": ACCESS_LOG_FIELDS},
                },
            }
        ],
        "route_config": {
            "name": "quicbed",
            "max_direct_response_body_size_bytes": max(largest, 4096),
            "virtual_hosts": [{"name": "quicbed", "domains": ["*"], "routes": rts}],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _ANY + "extensions.filters.http.router.v3.Router"},
            }
        ],
    }
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
        "filter_chains": [
            {
                "transport_socket": {
                    "name": "envoy.transport_sockets.quic",
                    "typed_config": {
                        "@type": _ANY + "extensions.transport_sockets.quic.v3"
                        ".QuicDownstreamTransport",
                        "enable_early_data": True,
                        "downstream_tls_context": tls,
                    },
                },
                "filters": [
                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                ],
            }
        ],
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
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    n = len(hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"])
    return {"config": s["out"], "routes": n}


def main(argv: list[str]) -> int:
    out = answer(argv)
    print(json.dumps(out))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
