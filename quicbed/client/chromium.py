"""Headless Chromium in the client namespace, and the driver that loads pages in it.

The command line is the reference study's, with what it missed:
- network prediction off in the profile's Preferences (a navigation preconnect
  would race the measured connection; connect/TLS timings would read -1);
- ``MAP * ~NOTFOUND`` after the test host's mapping, and the background-networking
  switches, so Chromium contacts nothing but the test server;
- QUIC forced for the test origin on the h3 arm, QUIC off on the h2 arm;
- the leaf certificate trusted by SPKI pin, nothing else relaxed.
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
from quicbed.testbed.base import Process, RPath, Testbed

CHROMIUM = "chromium"

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


@dataclass
class BrowserSpec:
    arm: str  # the arm's name: its profile and logs are named after it
    host: str
    server_ip: str
    spki_pin: str
    user_data_dir: RPath  # on the client's machine
    port: int = 443
    protocol: str = "h2"  # h2 | h3: what the browser is made to speak
    net_log: RPath | None = None
    #: TLS key log (NSS key log format; Chromium writes QUIC's secrets there too)
    ssl_key_log: RPath | None = None


def command_line(spec: BrowserSpec) -> list[str]:
    """The full Chromium argv for one arm (stored with the results)."""
    if spec.protocol not in ("h2", "h3"):
        raise QuicbedError(f"arm {spec.arm}: unknown protocol {spec.protocol!r} (h2 or h3)")
    argv = [CHROMIUM, *QUIET,
            f"--user-data-dir={spec.user_data_dir}",
            "--remote-debugging-port=0",
            f"--host-resolver-rules=MAP {spec.host} {spec.server_ip}, MAP * ~NOTFOUND",
            f"--ignore-certificate-errors-spki-list={spec.spki_pin}",
            "--enable-net-benchmarking"]  # fmt: skip
    if spec.protocol == "h3":
        argv += ["--enable-quic", f"--origin-to-force-quic-on={spec.host}:{spec.port}"]
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
        seed_profile(tb, self.spec.user_data_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = command_line(self.spec)
        (self.log_dir / f"chromium-{self.spec.arm}.argv.json").write_text(json.dumps(argv))
        self._log = tb.outbox("client", self.log_dir) / f"chromium-{self.spec.arm}.log"
        self.chrome = tb.spawn("client", argv, log=self._log)

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
        self.driver = subprocess.Popen(
            tb.argv("client", ["node", str(load_js), str(port)]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.log_dir / f"driver-{self.spec.arm}.log", "ab"),  # noqa: SIM115
            text=True, bufsize=1, preexec_fn=proc._die_with_parent,
        )  # fmt: skip

    def ready(self, timeout: float = 30) -> None:
        """The driver's hello: it reached Chromium and is ready for loads."""
        hello = self._read(timeout)
        if not hello.get("ready"):
            self.stop()
            raise QuicbedError(f"page-load driver failed: {hello.get('error')}")
        self.version = hello.get("browser", "")

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.driver and self.driver.stdout
        ready, _, _ = select.select([self.driver.stdout], [], [], timeout)
        if not ready:
            raise QuicbedError(f"page-load driver gave no answer in {timeout:g} s")
        line = self.driver.stdout.readline()
        if not line:
            raise QuicbedError(f"page-load driver exited (code {self.driver.poll()})")
        return json.loads(line)

    def load(self, url: str, *, fresh_context: bool, timeout_s: float) -> dict[str, Any]:
        """One page load; a failed load comes back with ok=false and the reason."""
        if self.driver is None or self.driver.poll() is not None:
            return {"ok": False, "error": "driver not running", "har": None, "nav": None}
        assert self.driver.stdin
        cmd = {"cmd": "load", "url": url, "fresh_context": fresh_context,
               "timeout_ms": int(timeout_s * 1000)}  # fmt: skip
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
