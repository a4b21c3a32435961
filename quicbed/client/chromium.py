"""Headless Chromium in the client namespace, and the driver that loads pages in it.

The command line is the reference study's, with what it missed:
- network prediction off in the profile's Preferences (a navigation preconnect
  would race the measured connection; connect/TLS timings would read -1);
- ``MAP * ~NOTFOUND`` after the test host's mapping, and the background-networking
  switches, so Chromium contacts nothing but the test server;
- QUIC forced for the test origin on the h3 arm, QUIC off on the h2 arm;
- the leaf certificate trusted by SPKI pin, nothing else relaxed.

Two clients (``BrowserSpec.client``):

- ``chromium``: the current Chromium (Debian's, or Chrome for Testing), h2 and h3;
- ``chromium72``: the headless shell of Chromium 72.0.3617.0, quicbed's gQUIC client
  (roles/chromium_client_gquic): h2 and gQUIC Q039/Q043/Q044, no IETF QUIC. It has
  no ``chrome.*`` (so no chrome.benchmarking: the driver runs with ``--fallbacks``
  and reports which clearing steps ran), writes no NetLog, reads no Preferences
  (it has no predictor to turn off), and ignores the SPKI pin for QUIC: the test CA
  goes into its own NSS database, under a throwaway HOME inside the arm's profile
  (Chromium on Linux reads ``$HOME/.pki/nssdb``), which ``stop`` removes with the
  profile. It has unpatched vulnerabilities: it only ever loads quicbed's own test
  pages (everything else resolves to NOTFOUND).
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.paths import Run, program_build
from quicbed.testbed.base import Process, RPath, Testbed

CHROMIUM = "chromium"
#: Chromium 72's headless shell as roles/chromium_client_gquic links it on PATH
CHROMIUM72 = "chromium72"
#: what the driver's hello must name for ``chromium72`` (the role's pinned build)
CHROMIUM72_BUILD = "HeadlessChrome/72.0.3617.0"
CLIENTS = ("chromium", "chromium72")
#: gQUIC versions Chromium 72 offers that quicbed's gQUIC arm may ask for
GQUIC_VERSIONS = ("Q039", "Q043", "Q044")
#: the certificate nickname of the test CA in a chromium72 browser's NSS database
CA_NICKNAME = "quicbed test CA"

#: switches that keep Chromium from calling home on a closed network
QUIET = [
    "--headless=new",
    "--no-sandbox",  # as root; the browser only ever sees our own test pages
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,"
    "CertificateTransparencyComponentUpdater,NetworkTimeServiceQuerying",
    "--metrics-recording-only",
    "--no-pings",
    "--password-store=basic",
    "--use-mock-keychain",
]


#: Chromium 72 has no ``--headless=new`` (that mode came with 109): its headless
#: shell is the old headless; the other switches are the same (those it does not
#: know it ignores, none breaks it)
QUIET72 = ["--headless", *QUIET[1:]]


@dataclass
class BrowserSpec:
    arm: str  # the arm's name: its profile and logs are named after it
    host: str
    server_ip: str
    spki_pin: str
    user_data_dir: RPath  # on the client's machine
    port: int = 443
    #: h2 | h3 | gquic: what the browser is made to speak (gquic: chromium72 only)
    protocol: str = "h2"
    net_log: RPath | None = None
    #: TLS key log (NSS key log format; Chromium writes QUIC's secrets there too;
    #: chromium72 writes TLS's only: gQUIC's own crypto is not in it)
    ssl_key_log: RPath | None = None
    #: chromium (the current Chromium) | chromium72 (the gQUIC client)
    client: str = "chromium"
    #: gquic only: Q039, Q043 or Q044 (forced with --quic-version=QUIC_VERSION_39 etc.)
    quic_version: str | None = None
    #: the test CA on the client's machine; chromium72 needs it (imported into its
    #: own NSS database); the current Chromium trusts the leaf by SPKI pin instead
    ca_cert: RPath | None = None
    #: QUIC connection options (4-letter tags) the browser sends the server: Google
    #: QUICHE servers take their congestion control and loss detection from the ones
    #: their client sends (quicbed.servers.envoy); h3 only
    quic_connection_options: tuple[str, ...] = ()

    @classmethod
    def software(cls, client: str, run: Run) -> dict[str, Any] | None:
        """The build of ``client`` on the client's machine (``run`` asks there), for the
        software check (quicbed.results.provenance): chromium by the version it prints (Debian's
        ``chromium`` on PATH is a wrapper script, whose digest says nothing of the
        browser), chromium72, which prints none, by the SHA-256 of the headless shell its
        link names (the role's pinned build). None where it is not installed."""
        if client == CHROMIUM72:
            where = run(["sh", "-c", f'readlink -f "$(command -v {CHROMIUM72})"'])
            return program_build(run, where) if where else None
        version = run([CHROMIUM, "--version"])
        return {"version": version} if version else None

    @property
    def home(self) -> RPath:
        """chromium72's throwaway HOME, inside the profile (holds ``.pki/nssdb``)."""
        return self.user_data_dir / "home"

    @property
    def nss_db(self) -> RPath:
        return self.home / ".pki" / "nssdb"


def check_spec(spec: BrowserSpec) -> None:
    """Refuse a client/protocol/version combination the browser cannot honour,
    naming the value, before anything starts."""
    a = spec.arm
    if spec.client not in CLIENTS:
        raise QuicbedError(f"arm {a}: unknown client {spec.client!r} (chromium or chromium72)")
    if spec.protocol not in ("h2", "h3", "gquic"):
        raise QuicbedError(f"arm {a}: unknown protocol {spec.protocol!r} (h2, h3 or gquic)")
    if spec.client == "chromium72" and spec.protocol == "h3":
        raise QuicbedError(
            f"arm {a}: protocol 'h3' with client 'chromium72': Chromium 72 has "
            f"no IETF QUIC v1 (it speaks gQUIC: protocol gquic)"
        )
    if spec.client == "chromium" and spec.protocol == "gquic":
        raise QuicbedError(
            f"arm {a}: protocol 'gquic' with client 'chromium': the current "
            f"Chromium has no gQUIC (use client chromium72)"
        )
    if spec.protocol == "gquic":
        if spec.quic_version is None:
            raise QuicbedError(
                f"arm {a}: protocol 'gquic' needs a quic_version ({', '.join(GQUIC_VERSIONS)})"
            )
        if spec.quic_version not in GQUIC_VERSIONS:
            raise QuicbedError(
                f"arm {a}: unknown quic_version {spec.quic_version!r} "
                f"(Chromium 72's gQUIC: {', '.join(GQUIC_VERSIONS)})"
            )
    elif spec.quic_version is not None:
        raise QuicbedError(
            f"arm {a}: quic_version {spec.quic_version!r} is for protocol "
            f"gquic, not {spec.protocol!r}"
        )
    if spec.quic_connection_options and (spec.protocol != "h3" or spec.client != "chromium"):
        raise QuicbedError(
            f"arm {a}: QUIC connection options {','.join(spec.quic_connection_options)} "
            f"are sent by the current Chromium over h3 only (got {spec.client}, "
            f"{spec.protocol})"
        )
    if spec.client == "chromium72":
        if spec.ca_cert is None:
            raise QuicbedError(
                f"arm {a}: client 'chromium72' needs ca_cert (it trusts the test "
                f"CA from its own NSS database; it ignores the SPKI pin for "
                f"QUIC)"
            )
        if spec.net_log is not None:
            raise QuicbedError(
                f"arm {a}: net_log {str(spec.net_log)!r} with client "
                f"'chromium72': Chromium 72's headless shell writes no "
                f"NetLog"
            )


def quic_version_switch(version: str) -> str:
    """Chromium's name of a gQUIC version: Q039 -> QUIC_VERSION_39 (not ..._039: a name
    it does not know it replaces with its default, Q043, without a word)."""
    return f"QUIC_VERSION_{int(version[1:])}"


def command_line(spec: BrowserSpec) -> list[str]:
    """The full Chromium argv for one arm (stored with the results)."""
    check_spec(spec)
    old = spec.client == "chromium72"
    argv = [
        CHROMIUM72 if old else CHROMIUM,
        *(QUIET72 if old else QUIET),
        f"--user-data-dir={spec.user_data_dir}",
        "--remote-debugging-port=0",
        f"--host-resolver-rules=MAP {spec.host} {spec.server_ip}, MAP * ~NOTFOUND",
        f"--ignore-certificate-errors-spki-list={spec.spki_pin}",
        "--enable-net-benchmarking",
    ]
    if spec.protocol == "h3":
        argv += ["--enable-quic", f"--origin-to-force-quic-on={spec.host}:{spec.port}"]
        if spec.quic_connection_options:
            argv.append(f"--quic-connection-options={','.join(spec.quic_connection_options)}")
    elif spec.protocol == "gquic":
        assert spec.quic_version is not None  # check_spec
        argv += [
            "--enable-quic",
            f"--origin-to-force-quic-on={spec.host}:{spec.port}",
            f"--quic-version={quic_version_switch(spec.quic_version)}",
        ]
    else:
        argv += ["--disable-quic"]
    if spec.net_log:
        argv += [f"--log-net-log={spec.net_log}", "--net-log-capture-mode=Default"]
    if spec.ssl_key_log:
        argv += [f"--ssl-key-log-file={spec.ssl_key_log}"]
    argv.append("about:blank")
    return argv


def seed_profile(tb: Testbed, user_data_dir: RPath) -> None:
    """A fresh profile with network prediction off (``net.network_prediction_options: 2``)."""
    tb.remove("client", user_data_dir)
    prefs = {"net": {"network_prediction_options": 2}}
    tb.write_text("client", user_data_dir / "Default" / "Preferences", json.dumps(prefs))


def seed_nss_db(tb: Testbed, spec: BrowserSpec) -> None:
    """chromium72's own NSS database (``spec.nss_db``, under its throwaway HOME) with
    the test CA trusted for TLS servers, and nothing else. Call after ``seed_profile``
    (which empties the profile the HOME lives in)."""
    assert spec.ca_cert is not None  # check_spec
    db = f"sql:{spec.nss_db}"
    tb.mkdir("client", spec.nss_db)
    for argv in (
        ["certutil", "-N", "-d", db, "--empty-password"],
        ["certutil", "-A", "-d", db, "-n", CA_NICKNAME, "-t", "C,,", "-i", str(spec.ca_cert)],
    ):
        cp = tb.exec("client", argv, check=False)
        if cp.returncode != 0:
            why = (cp.stderr or cp.stdout).strip()[:300]
            raise QuicbedError(
                f"arm {spec.arm}: {' '.join(argv[:2])} failed on "
                f"{tb.name('client')}: {why} (is libnss3-tools installed? "
                f"roles/chromium_client_gquic)"
            )


class Browser:
    """One Chromium and one driver process for one arm of one cell, on the client role.

    The driver talks to Chromium's DevTools port on the client's own loopback and
    to us over its stdin/stdout, which the testbed carries (``ip netns exec`` or ssh).
    """

    def __init__(self, spec: BrowserSpec, tb: Testbed, log_dir: Path) -> None:
        self.spec = spec
        self.tb = tb
        self.log_dir = log_dir
        self.chrome: Process | None = None
        self.driver: subprocess.Popen[str] | None = None
        self.version = ""
        self._log: RPath | None = None

    def start(self, timeout: float = 30) -> None:
        """Launch, connect and wait for the driver's hello (one browser on its own)."""
        self.launch()
        self.connect(timeout)
        self.ready(timeout)

    def launch(self) -> None:
        """Start Chromium (returns at once; ``connect`` waits for it). Several browsers
        launched before any is connected start side by side."""
        tb = self.tb
        argv = command_line(self.spec)  # refuses a bad spec before anything is made
        seed_profile(tb, self.spec.user_data_dir)
        env = None
        if self.spec.client == "chromium72":
            seed_nss_db(tb, self.spec)
            env = {"HOME": str(self.spec.home)}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / f"chromium-{self.spec.arm}.argv.json").write_text(json.dumps(argv))
        self._log = tb.outbox("client", self.log_dir) / f"chromium-{self.spec.arm}.log"
        self.chrome = tb.spawn("client", argv, log=self._log, env=env)

    def connect(self, timeout: float = 30) -> None:
        """Wait for Chromium's DevTools port, then start the page-load driver on it."""
        tb = self.tb
        assert self.chrome is not None, "launch() first"
        port_file = self.spec.user_data_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (text := tb.read_text("client", port_file).strip()):
            if self.chrome.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise QuicbedError(
                    f"Chromium did not start on {tb.name('client')} (see {self._log})"
                )
            time.sleep(0.02)
        port = int(text.split()[0])
        load_js = tb.repo_dir("client") / "client" / "load.js"
        # chromium72 has no chrome.benchmarking: the driver falls back and says so per load
        fallbacks = ["--fallbacks"] if self.spec.client == "chromium72" else []
        self.driver = subprocess.Popen(
            tb.argv("client", ["node", str(load_js), str(port), *fallbacks]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.log_dir / f"driver-{self.spec.arm}.log", "ab"),  # noqa: SIM115
            text=True,
            bufsize=1,
            preexec_fn=proc._die_with_parent,
        )

    def ready(self, timeout: float = 30) -> None:
        """The driver's hello: it reached Chromium and is ready for loads."""
        hello = self._read(timeout)
        if not hello.get("ready"):
            self.stop()
            raise QuicbedError(f"page-load driver failed: {hello.get('error')}")
        self.version = hello.get("browser", "")
        if self.spec.client == "chromium72" and self.version != CHROMIUM72_BUILD:
            self.stop()
            raise QuicbedError(
                f"arm {self.spec.arm}: {CHROMIUM72} on {self.tb.name('client')} "
                f"is {self.version!r}, not {CHROMIUM72_BUILD} "
                f"(roles/chromium_client_gquic)"
            )

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.driver and self.driver.stdout
        ready, _, _ = select.select([self.driver.stdout], [], [], timeout)
        if not ready:
            raise QuicbedError(f"page-load driver gave no answer in {timeout:g} s")
        line = self.driver.stdout.readline()
        if not line:
            raise QuicbedError(f"page-load driver exited (code {self.driver.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def load(self, url: str, *, fresh_context: bool, timeout_s: float) -> dict[str, Any]:
        """One page load; a failed load comes back with ok=false and the reason."""
        if self.driver is None or self.driver.poll() is not None:
            return {"ok": False, "error": "driver not running", "har": None, "nav": None}
        assert self.driver.stdin
        cmd = {
            "cmd": "load",
            "url": url,
            "fresh_context": fresh_context,
            "timeout_ms": int(timeout_s * 1000),
        }
        self.driver.stdin.write(json.dumps(cmd) + "\n")
        self.driver.stdin.flush()
        try:
            return self._read(timeout_s + 30)
        except QuicbedError as exc:
            return {"ok": False, "error": str(exc), "har": None, "nav": None}

    def stop(self) -> None:
        if self.driver is not None:
            if self.driver.poll() is None and self.driver.stdin:
                try:
                    self.driver.stdin.write('{"cmd": "quit"}\n')
                    self.driver.stdin.flush()
                    self.driver.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            proc.stop_pid(self.driver.pid)
            self.driver = None
        if self.chrome is not None:
            self.chrome.stop(timeout=10)
            self.chrome = None
            if self.spec.client == "chromium72":
                # the old browser's profile, HOME and NSS database go with it
                self.tb.remove("client", self.spec.user_data_dir)
