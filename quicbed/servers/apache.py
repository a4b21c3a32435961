"""Apache 2.4 (HTTP/2, TLS 1.3) as the TCP arm, started from the apache_h2 role's config.

Apache takes the kernel's TCP congestion control of the server namespace (set per
condition by quicbed.link.tuning and recorded): it has no per-socket setting.
"""

from __future__ import annotations

from typing import Any

from quicbed.servers.base import WebServer

CONF = "/etc/quicbed/apache/httpd.conf"
APACHE = "/usr/sbin/apache2"


class ApacheServer(WebServer):
    name = "apache"
    arm = "h2"
    transport = "tcp"
    log_name = "access.log"

    def argv(self) -> list[str]:
        return [APACHE, "-f", CONF, "-D", "FOREGROUND"]

    def env(self) -> dict[str, str]:
        s = self.spec
        return {
            "QUICBED_LISTEN": f"{self.tb.server_ip}:{s.port}",
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

    def version(self) -> dict[str, Any]:
        out = self.tb.exec("server", [APACHE, "-v"], check=False).stdout.strip().splitlines()
        return {"server": self.name, "version": out[0] if out else None, "config": CONF}
