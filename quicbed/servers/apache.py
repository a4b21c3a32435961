"""Apache 2.4 (HTTP/2, TLS 1.3) as the TCP stack, started from the apache_h2 role's config.

Apache takes the kernel's TCP congestion control of the server namespace (set per
condition by quicbed.link.tuning and recorded): it has no per-socket setting, and
its log cannot say which one ran. So after every load the server's kernel is asked
(``ss -tin`` in the server's namespace, over the connections the browser still
holds open): that is the evidence a load's CC is checked against.
"""

from __future__ import annotations

import re
from typing import Any

from quicbed.servers.base import WebServer
from quicbed.testbed.base import RPath

CONF = "/etc/quicbed/apache/httpd.conf"
APACHE = "/usr/sbin/apache2"


#: the kernel's TCP congestion controls an arm may name (Linux's own names)
TCP_CCS = ("cubic", "bbr", "reno")
#: ss's flags before the CC name on a connection's detail line
_SS_FLAGS = {"ts", "sack", "ecn", "ecnseen", "fastopen", "noqueue"}
_WORD = re.compile(r"^[a-z][a-z0-9_]*$")


def ss_congestion(text: str) -> list[str]:
    """The congestion control of each connection in ``ss -tinH`` output, in order: on a
    connection's (indented) detail line, the first bare word that is not a flag."""
    out = []
    for line in text.splitlines():
        if not line[:1].isspace():
            continue  # the address line
        for tok in line.split():
            if ":" in tok or tok in _SS_FLAGS:
                continue
            if _WORD.match(tok):
                out.append(tok)
            break
    return out


class ApacheServer(WebServer):
    name = "apache"
    protocol = "h2"
    transport = "tcp"
    log_name = "access.log"
    ccs = TCP_CCS

    @property
    def log(self) -> RPath:
        return self.spec.logdir / self.log_name  # fixed by the role's httpd.conf

    def argv(self) -> list[str]:
        return [APACHE, "-f", CONF, "-D", "FOREGROUND"]

    def env(self) -> dict[str, str]:
        s = self.spec
        return {
            "QUICBED_LISTEN": f"{self.tb.server_ip}:{self.arm.port}",
            "QUICBED_DOCROOT": str(s.docroot),
            "QUICBED_CERT": str(s.cert),
            "QUICBED_KEY": str(s.key),
            "QUICBED_RUNDIR": str(s.logdir),
        }

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        reqs = []
        for line in lines:
            f = line.split()
            if len(f) < 11:
                continue
            reqs.append({"proto": f[2], "status": f[5], "tls": f[7], "resumed": f[8], "conn": f[9]})
        conns: dict[str, str] = {}
        for r in reqs:
            conns.setdefault(r["conn"], r["resumed"])
        return {
            "connections": len(conns),
            "requests": len(reqs),
            "tls_resumed": bool(conns) and all(v == "Resumed" for v in conns.values()),
            "protocols": sorted({r["proto"] for r in reqs}),
            "tls_versions": sorted({r["tls"] for r in reqs}),
        }

    def observe(self) -> dict[str, Any]:
        """``cc``: what the server's kernel says its connections to port 443 run."""
        cp = self.tb.exec(
            "server",
            ["ss", "-tinH", "state", "established", f"( sport = :{self.arm.port} )"],
            check=False,
        )
        if cp.returncode != 0:
            return {"cc_problem": f"ss failed: {cp.stderr.strip()[:200]}"}
        seen = ss_congestion(cp.stdout)
        return {"cc": sorted(set(seen)), "tcp_connections_open": len(seen)}

    def version(self) -> dict[str, Any]:
        out = self.tb.exec("server", [APACHE, "-v"], check=False).stdout.strip().splitlines()
        return {"server": self.name, "version": out[0] if out else None, "config": CONF}
