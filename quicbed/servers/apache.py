"""Apache 2.4 (HTTP/2, TLS 1.3) as the TCP stack, started from the apache_h2 role's config.

Apache takes the kernel's TCP congestion control of the server namespace (set per
condition by quicbed.link.tuning and recorded): it has no per-socket setting, and
its log cannot say which one ran. So after every load the server's kernel is asked
(``ss -tin`` in the server's namespace, over the connections the browser still
holds open): that is the evidence a load's CC is checked against.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import PurePosixPath
from typing import Any, ClassVar

from pydantic import Field, field_validator

from quicbed import hostparam
from quicbed.errors import QuicbedError
from quicbed.paths import Run, reads, sha256_of
from quicbed.replay.serve import ReplayServe, checked
from quicbed.servers import apache_replay
from quicbed.servers.webserver import Arm, Params, WebServer, cold_origins, cubic_beta_bound
from quicbed.settings import keyexchange, sockopts, tcpopts
from quicbed.tcpinfo import ss_congestion
from quicbed.testbed.lifecycle import RPath, Testbed

CONF = "/etc/quicbed/apache/httpd.conf"
APACHE = "/usr/sbin/apache2"


#: the kernel's TCP congestion controls an arm may name (Linux's own names)
TCP_CCS = ("cubic", "bbr", "reno")
#: TLS versions an arm may pin Apache to (``tls``), as mod_ssl's SSLProtocol names them
TLS_VERSIONS = {"1.2": "TLSv1.2", "1.3": "TLSv1.3"}


def log_requests(lines: list[str], earlier: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    """The requests of Apache's access log lines (the role's ``quicbed`` LogFormat), less
    those on a connection (client port) in ``earlier``: a load's connections are new, as
    the browser closes its connections before each load, so a line on an earlier
    load's connection is that load's, logged late. Before the client port was logged,
    every line looked like one connection, and such a line decided the next load's TLS
    resumption: the warm-up's full handshake judged the first measured load's."""
    reqs = []
    for line in lines:
        f = line.split()
        if len(f) == 11:
            raise QuicbedError(
                f"Apache's access log has no client port ({line!r}): {CONF} is from an "
                "older apache_h2 role; run `make setup` (or the role) again"
            )
        if len(f) < 12:
            continue
        if f[11] in earlier:
            continue
        sni = f[12] if len(f) > 12 and f[12] != "-" else ""
        # the negotiated suite, logged since the aead knob (an older role's line has none)
        cipher = f[13] if len(f) > 13 and f[13] != "-" else ""
        # a replayed response's recorded server time (f[14], from the map: the archive
        # says it too), how long the hook held it and its entry (apache_replay), logged
        # since the server-time setting
        slept = f[15] if len(f) > 15 and f[15] != "-" else ""
        entry = f[16] if len(f) > 16 and f[16] != "-" else ""
        reqs.append(
            {
                "proto": f[2],
                "status": f[5],
                "method": f[3],
                "bytes": f[6],
                "tls": f[7],
                "resumed": f[8],
                "port": f[11],
                "sni": sni,
                "cipher": cipher,
                "waited_us": slept,
                "entry": entry,
            }
        )
    return reqs


def replay_served(reqs: list[dict[str, str]]) -> list[dict[str, Any]]:
    """What Apache sent for each request of a replayed page it answered from an entry
    (quicbed.replay.verify.served_reasons): the entry (``o<origin>/e<entry>``), the
    body's bytes and how long the server-time hook held it (none where it did not
    run). Empty where no line names an entry: not a replayed page, or an older role's
    log, which does not say."""
    return [
        {
            "method": r["method"],
            "entry_ref": r["entry"],
            "bytes": int(r["bytes"]) if r["bytes"].isdigit() else None,
            "slept_ms": int(r["waited_us"] or 0) / 1000,
        }
        for r in reqs
        if r["entry"]
    ]


class TcpParams(keyexchange.KeyExchangeKnob, sockopts.AeadKnob, Params):
    """What a TCP arm may set. cubic_beta is Linux CUBIC's, host-wide
    (quicbed.hostparam) while the server runs; tls is the one TLS version Apache offers
    (default: the apache_h2 role's, TLS 1.3); the TCP options (quicbed.settings.tcpopts) apply on
    both ends while the server runs, verified per load from the SYN and SYN-ACK; aead the
    one TLS 1.3 cipher suite Apache offers (``SSLCipherSuite TLSv1.3``), verified per load
    from the suite Apache's log names for every connection."""

    cubic_beta: float | None = Field(default=None, description="CUBIC's loss backoff beta")
    tls: str | None = Field(default=None, description="TLS version of a TCP arm: 1.2 or 1.3")
    tcp_sack: bool | None = Field(default=None, description="net.ipv4.tcp_sack")
    tcp_ecn: int | None = Field(default=None, description="net.ipv4.tcp_ecn: 0, 1 or 2")
    tcp_window_scaling: bool | None = Field(default=None, description="net.ipv4.tcp_window_scaling")
    tcp_fastopen: int | None = Field(default=None, description="net.ipv4.tcp_fastopen (bits)")
    initcwnd: int | None = Field(default=None, description="initial window (route), segments")
    rmem: str | None = Field(default=None, description="receive-buffer preset, e.g. ws2")

    _beta = field_validator("cubic_beta")(cubic_beta_bound)


class ApacheServer(WebServer):
    name = "apache"
    cpu_map_file = "apache.cpu.yaml"
    protocol = "h2"
    transport = "tcp"
    log_name = "access.log"
    arms = ("h2",)
    ccs = TCP_CCS
    Params = TcpParams
    label = "TCP"
    colour = "#2065ab"
    software_name = "apache"
    program = APACHE
    #: it serves a replayed page: one virtual host per origin (quicbed.servers.apache_replay)
    replays = True
    knob_refusals: ClassVar[dict[str, str]] = {
        **dict.fromkeys(
            ("udp_rcvbuf", "udp_sndbuf", "client_udp_rcvbuf", "client_udp_sndbuf", "gso"),
            "cannot apply it: Apache runs TCP; UDP knobs are for QUIC arms (TCP's buffer "
            "is the rmem option)",
        ),
    }
    key_exchange_refusals: ClassVar[dict[str, str]] = {
        "x25519mlkem768": "cannot pin it: Debian 12's OpenSSL 3.0 has no ML-KEM (OpenSSL "
        "3.5 has), so an h2 arm runs x25519 or secp256r1",
    }

    @classmethod
    def software(cls, run: Run, bindir: RPath) -> dict[str, Any] | None:
        """Apache's version (``Apache/2.4.62``) and the SHA-256 of the binary, of the role's
        config and of every module it loads (``files``): HTTP/2 and TLS are modules, and a
        new mod_http2 under the same Apache version is another server."""
        build = super().software(run, bindir)
        if build is None:
            return None
        text = run([APACHE, "-v"]) or ""
        found = re.search(r"Apache/[\d.]+", text)
        reads(run, CONF)
        modules = re.findall(r"^\s*LoadModule\s+\S+\s+(\S+)", run(["cat", CONF]) or "", re.M)
        reads(run, *modules)
        files = sha256_of(run, [CONF, *modules]) or {}
        return {
            **build,
            "version": found.group(0) if found else None,
            "files": {PurePosixPath(k).name: v for k, v in files.items()},
        }

    @classmethod
    def caption(cls, arm: Arm, component: dict[str, Any]) -> str:
        # "Server version: Apache/2.4.71 (Debian)"
        version = str(component.get("version") or "apache").split(": ")[-1].split(" ")[0]
        return f"{version}, TLS {arm.params.get('tls', '1.3')}"

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check_arm(arm, cc, params)
        if "cubic_beta" in params and cc != "cubic":
            raise QuicbedError(f"arm {arm}: cubic_beta is CUBIC's; this arm runs {cc}")
        if "tls" in params and params["tls"] not in TLS_VERSIONS:
            raise QuicbedError(
                f"arm {arm}: tls {params['tls']!r} is not one of {', '.join(TLS_VERSIONS)}"
            )
        tcpopts.check(arm, params)
        return params

    @classmethod
    def check_testbed(cls, arm: Arm, tb: Testbed) -> None:
        super().check_testbed(arm, tb)
        if "cubic_beta" in arm.params:
            hostparam.call(tb, "check", hostparam.TCP_CUBIC_BETA, "", hostparam.holder_of(tb))

    @property
    def log(self) -> RPath:
        return self.spec.logdir / self.log_name  # fixed by the role's httpd.conf

    def hold(self, held: ExitStack) -> None:
        """TCP CUBIC's beta on the server's host and the arm's TCP options on both ends
        while Apache runs, and the SYN capture that verifies them; a replayed page's
        tree on the server (made once per archive)."""
        self._syns: tcpopts.SynCapture | None = None
        if self.spec.replay is not None:
            self._put_replay_tree(self.spec.replay)
        if "cubic_beta" in self.arm.params:
            held.enter_context(
                hostparam.tcp_cubic_beta(
                    self.tb, self.arm.params["cubic_beta"], hostparam.holder_of(self.tb)
                )
            )
        if tcpopts.wanted(self.arm.params):
            held.enter_context(tcpopts.applied(self.tb, self.arm.params))
            self._syns = tcpopts.SynCapture(self.tb, self.arm.port, self.arm.name)
            held.callback(self._syns.abort)

    def _put_replay_tree(self, serve: ReplayServe) -> None:
        """The archive's virtual hosts and as-is files (quicbed.servers.apache_replay),
        made on the controller from the stored archive and pushed beside it."""
        there = serve.archive / apache_replay.TREE
        if self.tb.has_file("server", there / apache_replay.CONF):
            return
        folder, archive = checked(serve.name, serve.digest)
        stage = self.tb.local_stage("server", f"replay-apache-{serve.digest[:16]}")
        apache_replay.write_tree(folder, archive, serve, stage, str(self.spec.key))
        self.tb.push("server", stage, there)

    def argv(self) -> list[str]:
        tls = self.arm.params.get("tls")
        pin = ["-C", f'Define QUICBED_SSL_PROTOCOL "-all +{TLS_VERSIONS[tls]}"'] if tls else []
        groups = keyexchange.OPENSSL.get(self.arm.key_exchange or "")
        if groups:  # SSLOpenSSLConfCmd Groups, in the role's httpd.conf
            pin += ["-C", f"Define QUICBED_SSL_GROUPS {groups}"]
        aead = self.arm.params.get("aead")
        if aead:  # SSLCipherSuite TLSv1.3, in the role's httpd.conf
            pin += ["-C", f"Define QUICBED_SSL_CIPHERS {sockopts.AEADS[aead]}"]
        replay = [] if self.spec.replay is None else ["-D", "QUICBED_REPLAY"]
        if self.spec.replay is not None and self.spec.replay.wait:  # apache_replay's hook
            replay += ["-D", apache_replay.WAIT_DEFINE]
        return [APACHE, *pin, *replay, "-f", CONF, "-D", "FOREGROUND"]

    def env(self) -> dict[str, str]:
        s = self.spec
        return {
            "QUICBED_LISTEN": f"{self.tb.server_ip}:{self.arm.port}",
            "QUICBED_DOCROOT": str(s.docroot),
            "QUICBED_CERT": str(s.cert),
            "QUICBED_KEY": str(s.key),
            "QUICBED_RUNDIR": str(s.logdir),
            **(
                {"QUICBED_REPLAY_CONF": str(s.replay.archive / apache_replay.TREE / "replay.conf")}
                if s.replay is not None
                else {}
            ),
        }

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        reqs = log_requests(lines, getattr(self, "_earlier", frozenset()))
        conns: dict[str, str] = {}
        sni: dict[str, str] = {}
        for r in reqs:
            conns.setdefault(r["port"], r["resumed"])
            sni.setdefault(r["port"], r["sni"])
        return {
            **cold_origins((sni[p], v == "Resumed") for p, v in conns.items()),
            "connections": len(conns),
            "requests": len(reqs),
            "tls_resumed": bool(conns) and all(v == "Resumed" for v in conns.values()),
            "protocols": sorted({r["proto"] for r in reqs}),
            "tls_versions": sorted({r["tls"] for r in reqs}),
            **(
                {"tls_cipher": sorted({r["cipher"] for r in reqs if r["cipher"]})}
                if any(r["cipher"] for r in reqs)
                else {}
            ),
            # a replayed page's (none from an older role: served_reasons names it)
            **({"replay_served": sent} if (sent := replay_served(reqs)) else {}),
        }

    def mark(self) -> None:
        """Also remembers the connections the last load's lines came from (Apache now and
        then writes a load's last line more than the 2 s quicbed waits for it after the
        load, so it lands in the next load's window: it is the last load's); starts the
        load's SYN capture, when the arm sets TCP options."""
        self._earlier = frozenset(r["port"] for r in log_requests(self.since_mark()))
        super().mark()
        syns = getattr(self, "_syns", None)  # set by start
        if syns is not None:
            syns.begin()

    def observe(self) -> dict[str, Any]:
        """``cc``: what the server's kernel says its connections to port 443 run; with
        TCP options, the load's SYN and SYN-ACK (``tcp_syn``) and the kernels' values;
        the base's (the hellos of a pinned key exchange)."""
        facts = self._observe_cc()  # first: a flow's connection is open only while it lingers
        syns = getattr(self, "_syns", None)
        if syns is not None:
            facts.update(syns.end())
            kernel = tcpopts.read_kernel(self.tb, self.arm.params)
            if kernel:
                facts["tcp_kernel"] = kernel
        facts.update(super().observe())  # the hellos of a pinned key exchange
        return facts

    def _observe_cc(self) -> dict[str, Any]:
        cp = self.tb.exec(
            "server",
            ["ss", "-tinH", "state", "established", f"( sport = :{self.arm.port} )"],
            check=False,
        )
        if cp.returncode != 0:
            return {"cc_problem": f"ss failed: {cp.stderr.strip()[:200]}"}
        seen = ss_congestion(cp.stdout)
        facts: dict[str, Any] = {"cc": sorted(set(seen)), "tcp_connections_open": len(seen)}
        if "cubic_beta" in self.arm.params:  # the host's value right after the load
            got = hostparam.call(self.tb, "read", hostparam.TCP_CUBIC_BETA, "", "")
            facts["cubic_beta_kernel"] = int(got["current"])
        return facts

    def param_evidence(self, facts: dict[str, Any]) -> list[str]:
        """CUBIC's beta in the kernel's own 1/1024 units, as read from the host; the TLS
        version of every request, from Apache's own log; the TCP options from the load's
        handshakes (quicbed.settings.tcpopts.evidence); the key exchange from its hellos
        (quicbed.settings.keyexchange.evidence); the cipher suite of every connection, from
        Apache's own log (quicbed.settings.sockopts.evidence)."""
        reasons = tcpopts.evidence(self.arm.params, facts)
        reasons += keyexchange.evidence(self.arm.key_exchange, facts)
        reasons += sockopts.evidence(self.arm.params, facts)
        if "tls" in self.arm.params:
            want = TLS_VERSIONS[self.arm.params["tls"]]
            if facts.get("tls_versions") != [want]:
                got = ",".join(facts.get("tls_versions") or []) or "no TLS version"
                reasons.append(f"Apache's log shows {got}, not {want}")
        if "cubic_beta" in self.arm.params:
            want_beta = int(hostparam.beta_to_kernel(self.arm.params["cubic_beta"]))
            got_beta = facts.get("cubic_beta_kernel")
            if got_beta != want_beta:
                reasons.append(
                    f"the server host's TCP CUBIC beta was {got_beta}/1024 after this "
                    f"load, not {want_beta}/1024"
                )
        return reasons

    def version(self) -> dict[str, Any]:
        out = self.tb.exec("server", [APACHE, "-v"], check=False).stdout.strip().splitlines()
        return {"server": self.name, "version": out[0] if out else None, "config": CONF}
