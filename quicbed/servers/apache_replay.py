"""How Apache replays an archive: one virtual host per origin, each response a file.

Each recorded response becomes an ``.asis`` file (mod_asis: the status line, the
recorded headers by the header rule, the body's length and the body's bytes), and
each origin a virtual host on the origin's own address with the origin's own
certificate. The matching rule (docs/replay.md) is two lookups in mod_rewrite maps of
the raw request line (``THE_REQUEST``, never decoded): method and path with query
first, then method and path alone; else the origin's 404 file. mod_headers marks every
response with how it matched (quicbed.replay.verify.REPLAY_HEADER), as every replay
server does.

Each answered request's environment names its entry, ``o<origin>/e<entry>`` (the
files' names: the origin's and the entry's places in the archive), which the role's
LogFormat logs, so a load's facts say per request which entry Apache sent.

**Server time** (a cell's ``server_time``): each map's value names the entry's file and
its recorded server time in microseconds (``e3:12000``); mod_rewrite puts the time into
the request's environment (``QB_WAIT_US``), and where Apache runs with
``-D QUICBED_REPLAY_WAIT`` a mod_lua fixup hook (``wait.lua``, written beside the maps)
sleeps that long before mod_asis answers, and notes it (``qb_waited_us``). Without the
define the hook is not loaded and every response goes at once.
"""

from __future__ import annotations

import http
import shutil
from pathlib import Path, PurePosixPath

from quicbed.replay.archive import BODIES, REPLAY_HEADER, Archive, split_url
from quicbed.replay.serve import ReplayServe

#: the folder of the generated tree inside the archive's folder on the server (named
#: by its layout: a tree of an older layout beside it is never read)
TREE = "apache-2"
CONF = "replay.conf"
#: the define that loads mod_lua (the role's httpd.conf) and the hook (replay.conf)
WAIT_DEFINE = "QUICBED_REPLAY_WAIT"
WAIT_HOOK = "wait.lua"
#: the hook: sleep the time mod_rewrite found for the entry, before the response (mod_lua
#: offers ``r.usleep``, a function of microseconds, not a method)
WAIT_LUA = """-- quicbed: each response after its recorded server time (generated; docs/replay.md)
function wait(r)
  local us = tonumber(r.subprocess_env["QB_WAIT_US"])
  if us ~= nil and us > 0 then
    r.usleep(us)
    r.notes["qb_waited_us"] = tostring(us)
  end
  return apache2.DECLINED
end
"""


def _wait_us(wait_ms: float | None) -> int:
    """An entry's recorded server time in whole microseconds (0: none recorded)."""
    return round((wait_ms or 0) * 1000)


def _target(url: str) -> str:
    """The request target as a browser sends it: path, and ``?query`` if any."""
    _, path, query = split_url(url)
    return f"{path}?{query}" if query else path


def _asis(status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    lines = [f"Status: {status} {phrase}"]
    lines += [f"{k}: {v}" for k, v in headers if "\n" not in v and "\r" not in v]
    lines.append(f"Content-Length: {len(body)}")
    return ("\n".join(lines) + "\n\n").encode("latin-1", "replace") + body


def write_tree(folder: Path, archive: Archive, serve: ReplayServe, out: Path, key: str) -> None:
    """Into ``out``: per origin its ``.asis`` files and maps, and ``replay.conf``, whose
    paths are those the tree will have on the server (``serve.archive``/TREE)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    there = PurePosixPath(str(serve.archive)) / TREE
    conf = [
        "# quicbed: a replayed page, one virtual host per origin (generated; docs/replay.md)",
        "# (the role's httpd.conf loads mod_asis and mod_rewrite for it, and mod_lua for",
        f"# the server-time hook where Apache runs with -D {WAIT_DEFINE})",
        f"<IfDefine {WAIT_DEFINE}>",
        f'LuaHookFixups "{there}/{WAIT_HOOK}" wait',
        "</IfDefine>",
    ]
    (out / WAIT_HOOK).write_text(WAIT_LUA)
    by_host = {o.host: o for o in archive.origins}
    for i, served in enumerate(serve.origins):
        origin = by_host[served.host]
        own, own_there = out / f"o{i}", there / f"o{i}"
        own.mkdir()
        exact: dict[str, str] = {}
        by_path: dict[str, str] = {}
        for j, e in enumerate(origin.entries):
            key_url, key_path = f"{e.method}:{_target(e.url)}", f"{e.method}:{split_url(e.url)[1]}"
            if key_url in exact:
                continue  # a later recording of the same request is never served
            body = (folder / BODIES / e.body).read_bytes()
            (own / f"e{j}.asis").write_bytes(_asis(e.status, e.headers, body))
            exact[key_url] = f"e{j}:{_wait_us(e.wait_ms)}"
            by_path.setdefault(key_path, exact[key_url])
        (own / "unmatched.asis").write_bytes(_asis(404, (), b""))
        (own / "exact.map").write_text("".join(f"{k} {v}\n" for k, v in exact.items()))
        (own / "path.map").write_text("".join(f"{k} {v}\n" for k, v in by_path.items()))
        conf += [
            f"Listen {served.ip}:443 https",
            f"<VirtualHost {served.ip}:443>",
            f"    ServerName {served.host}",
            "    Protocols h2",
            "    SSLEngine on",
            f'    SSLCertificateFile "{served.cert}"',
            f'    SSLCertificateKeyFile "{key}"',
            f'    DocumentRoot "{own_there}"',
            f'    <Directory "{own_there}">',
            "        Options None",
            "        AllowOverride None",
            "        Require all granted",
            "    </Directory>",
            "    RewriteEngine on",
            f'    RewriteMap exact{i} "txt:{own_there}/exact.map"',
            f'    RewriteMap path{i} "txt:{own_there}/path.map"',
            r'    RewriteCond "%{THE_REQUEST}" "^(\S+) (\S+) "',
            f'    RewriteCond "${{exact{i}:%1:%2}}" "^(e[0-9]+):([0-9]+)$"',
            f'    RewriteRule "^" "{own_there}/%1.asis" '
            f"[L,H=send-as-is,E=QB_REPLAY:url,E=QB_WAIT_US:%2,E=QB_ENTRY:o{i}/%1]",
            r'    RewriteCond "%{THE_REQUEST}" "^(\S+) ([^?\s]+)"',
            f'    RewriteCond "${{path{i}:%1:%2}}" "^(e[0-9]+):([0-9]+)$"',
            f'    RewriteRule "^" "{own_there}/%1.asis" '
            f"[L,H=send-as-is,E=QB_REPLAY:path,E=QB_WAIT_US:%2,E=QB_ENTRY:o{i}/%1]",
            f'    RewriteRule "^" "{own_there}/unmatched.asis" [L,H=send-as-is,E=QB_REPLAY:none]',
            f'    Header always set {REPLAY_HEADER} "%{{QB_REPLAY}}e"',
            "</VirtualHost>",
        ]
    (out / CONF).write_text("\n".join(conf) + "\n")
