"""Headless Chromium in the client namespace, and the driver that loads pages in it.

The command line is the reference study's, with what it missed:
- network prediction off in the profile's Preferences (a navigation preconnect
  would race the measured connection; connect/TLS timings would read -1);
- ``MAP * ~NOTFOUND`` after the test host's mapping, and the background-networking
  switches, so Chromium contacts nothing but the test server;
- QUIC forced for the test origin on the h3 arm, QUIC off on the h2 arm;
- the leaf certificate trusted by SPKI pin, nothing else relaxed.

Two browsers of the registry (quicbed.client.browsers; ``BrowserSpec.client``):

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
import time
from typing import Any, ClassVar

from quicbed.client.browser import Browser, BrowserSpec, seed_nss_db
from quicbed.errors import QuicbedError
from quicbed.paths import Run, program_build, reads
from quicbed.settings import tparams
from quicbed.testbed.lifecycle import RPath, Testbed

CHROMIUM = "chromium"
#: the browser Debian's ``chromium`` (a wrapper script) runs, which prints the version
CHROMIUM_PROGRAM = "/usr/lib/chromium/chromium"
#: Chromium 72's headless shell as roles/chromium_client_gquic links it on PATH
CHROMIUM72 = "chromium72"
#: what the driver's hello must name for ``chromium72`` (the role's pinned build)
CHROMIUM72_BUILD = "HeadlessChrome/72.0.3617.0"
#: gQUIC versions Chromium 72 offers that quicbed's gQUIC arm may ask for
GQUIC_VERSIONS = ("Q039", "Q043", "Q044")

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


def chromium_of(spec: BrowserSpec) -> type[Chromium]:
    """The Chromium variant ``spec.client`` names (a ``Chromium`` of the registry)."""
    from quicbed.client import browsers  # the registry imports this module

    found = browsers().get(spec.client)
    if found is None or not issubclass(found, Chromium):
        names = ", ".join(n for n, c in browsers().items() if issubclass(c, Chromium))
        raise QuicbedError(f"arm {spec.arm}: browser {spec.client!r} is not a Chromium ({names})")
    return found


def quic_version_switch(version: str) -> str:
    """Chromium's name of a gQUIC version: Q039 -> QUIC_VERSION_39 (not ..._039: a name
    it does not know it replaces with its default, Q043, without a word)."""
    return f"QUIC_VERSION_{int(version[1:])}"


def command_line(spec: BrowserSpec) -> list[str]:
    """The full Chromium argv for one arm (stored with the results), refusing first what
    the variant ``spec.client`` names cannot do."""
    cls = chromium_of(spec)
    cls.check(spec)
    argv = [
        cls.program,
        *cls.quiet,
        f"--user-data-dir={spec.user_data_dir}",
        "--remote-debugging-port=0",
        "--host-resolver-rules="
        + ", ".join([*(f"MAP {h} {at}" for h, at in spec.host_map()), "MAP * ~NOTFOUND"]),
        f"--ignore-certificate-errors-spki-list={spec.spki_pin}",
        "--enable-net-benchmarking",
    ]
    if spec.protocol == "h3":
        argv += ["--enable-quic", f"--origin-to-force-quic-on={','.join(spec.quic_origins())}"]
        if spec.quic_connection_options:
            argv.append(f"--quic-connection-options={','.join(spec.quic_connection_options)}")
    elif spec.protocol == "gquic":
        assert spec.quic_version is not None  # Chromium.check
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


class Chromium(Browser):
    """The current Chromium and the CDP page-load driver (``client/load.js``).

    The driver talks to Chromium's DevTools port on the client's own loopback and
    to us over its stdin/stdout, which the testbed carries (``ip netns exec`` or ssh).
    """

    name = CHROMIUM
    cpu_map_file = "chromium.cpu.yaml"
    #: Chromium takes no transport parameter from its command line or field trials: its
    #: windows are compiled in (net/quic/quic_context.cc: kQuicSessionMaxRecvWindowSize
    #: 15 MiB, kQuicStreamMaxRecvWindowSize 6 MiB), its idle timeout comes only from a
    #: field-trial parameter in whole seconds (QUIC's ``idle_connection_timeout_seconds``),
    #: and ``--quic-max-packet-length`` sets the size of the packets it sends, not the
    #: max_udp_payload_size it advertises (docs/transport-params.md)
    transport_support = tparams.ClientSupport(
        "Chromium",
        (),
        {
            **dict.fromkeys(
                ("initial_max_data", *tparams.STREAM_DATA, tparams.AUTOTUNE),
                "has no switch for it: its flow-control windows are compiled in "
                "(kQuicSessionMaxRecvWindowSize 15 MiB, kQuicStreamMaxRecvWindowSize 6 MiB)",
            ),
            **dict.fromkeys(
                ("initial_max_streams_bidi", "initial_max_streams_uni"),
                "has no switch for it (its stream limits are compiled in)",
            ),
            "max_idle_timeout": "has no switch for it (only the field-trial parameter "
            "idle_connection_timeout_seconds, which quicbed does not drive)",
            "max_udp_payload_size": "has no switch for it (--quic-max-packet-length sets "
            "the packets it sends, not what it advertises)",
            **dict.fromkeys(
                ("max_ack_delay", "ack_delay_exponent", "active_connection_id_limit"),
                "has no switch for it (QUICHE's values are compiled in)",
            ),
        },
    )
    source_files = ("client/package.json", "client/package-lock.json")
    label = "Chromium"
    protocols = ("h2", "h3")
    net_log = True
    program = CHROMIUM
    role = "chromium_client"
    #: the switches that keep it quiet on a closed network
    quiet: ClassVar[tuple[str, ...]] = tuple(QUIET)
    #: it sends QUIC connection options (``--quic-connection-options``) over h3
    sends_connection_options: ClassVar[bool] = True
    #: the page-load driver's flags for it (``client/load.js``)
    driver_flags: ClassVar[tuple[str, ...]] = ()
    #: it maps every origin of a replayed page by its resolver rules
    replays: ClassVar[bool] = True
    #: its driver keeps the bodies (Network.getResponseBody) at traces level full
    har_content: ClassVar[bool] = True

    @classmethod
    def software(cls, run: Run) -> dict[str, Any] | None:
        """By the version it prints: Debian's ``chromium`` on PATH is a wrapper script,
        whose digest says nothing of the browser. From the wrapper and the program it
        runs (Chrome for Testing's ``chromium`` is a link to its program, and Debian's
        program is then not there)."""
        reads(run, CHROMIUM, CHROMIUM_PROGRAM)
        version = run([CHROMIUM, "--version"])
        return {"version": version} if version else None

    @classmethod
    def check(cls, spec: BrowserSpec) -> None:
        """The browser's own refusals, then a gQUIC version it offers, and QUIC connection
        options only where it sends them."""
        super().check(spec)
        a = spec.arm
        if spec.protocol == "gquic":
            if spec.quic_version is None:
                raise QuicbedError(
                    f"arm {a}: protocol 'gquic' needs a quic_version ({', '.join(GQUIC_VERSIONS)})"
                )
            if spec.quic_version not in GQUIC_VERSIONS:
                raise QuicbedError(
                    f"arm {a}: unknown quic_version {spec.quic_version!r} "
                    f"({cls.label}'s gQUIC: {', '.join(GQUIC_VERSIONS)})"
                )
        if spec.quic_connection_options and (
            spec.protocol != "h3" or not cls.sends_connection_options
        ):
            raise QuicbedError(
                f"arm {a}: QUIC connection options {','.join(spec.quic_connection_options)} "
                f"are sent by a Chromium that sends them, over h3 only (got {spec.client}, "
                f"{spec.protocol})"
            )

    def launch(self) -> None:
        """Start Chromium (returns at once; ``connect`` waits for it). Several browsers
        launched before any is connected start side by side."""
        tb = self.tb
        argv = command_line(self.spec)  # refuses a bad spec before anything is made
        seed_profile(tb, self.spec.user_data_dir)
        tb.mkdir("client", self.spec.tmpdir)
        env = {"TMPDIR": str(self.spec.tmpdir)}  # its temporary folders go with the profile
        if self.trusts_ca:  # by its own NSS database, under a throwaway HOME
            seed_nss_db(tb, self.spec, self.spec.nss_db, self.role)
            env["HOME"] = str(self.spec.home)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / f"chromium-{self.spec.arm}.argv.json").write_text(json.dumps(argv))
        self._log = tb.outbox("client", self.log_dir) / f"chromium-{self.spec.arm}.log"
        self.process = tb.spawn("client", argv, log=self._log, env=env)

    def connect(self, timeout: float = 30) -> None:
        """Wait for Chromium's DevTools port, then start the page-load driver on it."""
        tb = self.tb
        assert self.process is not None, "launch() first"
        port_file = self.spec.user_data_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (text := tb.read_text("client", port_file).strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise QuicbedError(
                    f"Chromium did not start on {tb.name('client')} (see {self._log})"
                )
            time.sleep(0.02)
        port = int(text.split()[0])
        load_js = tb.repo_dir("client") / "client" / "load.js"
        self._start_driver(["node", str(load_js), str(port), *self.driver_flags])


class Chromium72(Chromium):
    """The headless shell of Chromium 72, quicbed's gQUIC client (see the module's doc)."""

    name = CHROMIUM72
    source_files = ("client/chromium72/package.json", "client/chromium72/package-lock.json")
    label = "Chrome 72"
    protocols = ("h2", "gquic")
    net_log = False
    trusts_ca = True
    program = CHROMIUM72
    role = "chromium_client_gquic"
    component = "chromium72"
    quiet = tuple(QUIET72)
    sends_connection_options = False
    #: it has no chrome.benchmarking: the driver falls back and says so per load
    driver_flags = ("--fallbacks",)

    @classmethod
    def software(cls, run: Run) -> dict[str, Any] | None:
        """It prints no version: by the SHA-256 of the headless shell its link names
        (the role's pinned build)."""
        reads(run, CHROMIUM72)  # the link: pointed elsewhere, it names another file
        where = run(["sh", "-c", f'readlink -f "$(command -v {CHROMIUM72})"'])
        return program_build(run, where) if where else None

    def check_hello(self, hello: dict[str, Any]) -> None:
        if self.version != CHROMIUM72_BUILD:
            self.stop()
            raise QuicbedError(
                f"arm {self.spec.arm}: {CHROMIUM72} on {self.tb.name('client')} "
                f"is {self.version!r}, not {CHROMIUM72_BUILD} "
                f"(roles/chromium_client_gquic)"
            )

    def stopped(self) -> None:
        """The old browser's profile, HOME and NSS database go with it."""
        self.tb.remove("client", self.spec.user_data_dir)
