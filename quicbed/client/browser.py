"""The one interface every browser implements; a browser is one module of this package.

A browser runs on the testbed's ``client`` role, one per arm of a cell, and is driven
by a page-load driver (a Node program in the checkout's ``client/`` folder) that
speaks to it over the client's own loopback and to quicbed over its stdin/stdout:
one JSON command per line in, one JSON result per line out (``client/load.js`` says
the protocol). The class owns everything quicbed knows of its browser: which protocols
it can be made to speak (``protocols``), which modes it can measure (``modes``), how
it is installed and probed (``software``, ``check_testbed``), how it is started,
cleared between loads and stopped, and how figures name it (``label``). Nothing
outside this package names a browser's specifics; the spec asks the registry
(quicbed.client.browsers) what a browser can do, the runner starts what it names.

A load's result is the same for every browser: ``ok``, ``error``, a HAR 1.2 that
quicbed.client.har.metrics reads, the Navigation Timing entry of the page (``nav``),
its paint metrics (``paint``: FCP and LCP, client/paint.js), the browser context it
ran in, and what cleared the browser's state before it (``clearing``).
"""

from __future__ import annotations

import json
import select
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.paths import Run, setup_command
from quicbed.profile.components import own_map
from quicbed.settings import tparams
from quicbed.testbed.lifecycle import Process, RPath, Testbed

#: the browser of a page cell whose settings and stacks name none
DEFAULT = "chromium"
#: the certificate nickname of the test CA in a browser's own NSS database
CA_NICKNAME = "quicbed test CA"
#: the modes of a page cell (quicbed.spec.cellconfig.CellConfig.mode): one browser
#: context kept per arm (0-RTT and resumption), or a fresh one per load (1-RTT)
MODES = ("0rtt", "1rtt")


@dataclass
class BrowserSpec:
    """One arm's browser: what it loads, how it is made to speak, where its files go."""

    arm: str  # the arm's name: its profile and logs are named after it
    host: str
    server_ip: str
    spki_pin: str
    user_data_dir: RPath  # on the client's machine: the throwaway profile
    port: int = 443
    #: h2 | h3 | gquic: what the browser is made to speak (Browser.protocols)
    protocol: str = "h2"
    #: Chromium's NetLog (only a browser with ``net_log``)
    net_log: RPath | None = None
    #: TLS key log (NSS key log format; the QUIC secrets too where the browser's QUIC
    #: runs on NSS or BoringSSL: Chromium, Firefox; chromium72 writes TLS's only)
    ssl_key_log: RPath | None = None
    #: the registry name of the browser (quicbed.client.browsers)
    client: str = DEFAULT
    #: where the browser writes its own QUIC qlog, one file per connection (only a
    #: browser with ``qlog``: Firefox's neqo; Chromium's record is its NetLog)
    qlog_dir: RPath | None = None
    #: gquic only: Q039, Q043 or Q044
    quic_version: str | None = None
    #: the test CA on the client's machine, for a browser that trusts by CA (its own
    #: NSS database) instead of by the leaf's SPKI pin
    ca_cert: RPath | None = None
    #: QUIC connection options (4-letter tags) the browser sends the server: Google
    #: QUICHE servers take their congestion control and loss detection from the ones
    #: their client sends (quicbed.servers.envoy); h3 in Chromium only
    quic_connection_options: tuple[str, ...] = ()
    #: a replayed page's origins (quicbed.replay.serve): each host and the address the
    #: arm's server answers it at (``ip`` or ``ip:port`` for a QUIC arm off 443); empty:
    #: the one test host at ``server_ip``
    origins: tuple[tuple[str, str], ...] = ()
    #: keep every response's body in the load's HAR (a browser with ``har_content``; at
    #: traces level full), so the load can be imported as a replay archive
    har_content: bool = False
    #: capture every load's frames as the browser showed them (client/visual.js), for
    #: its visual progress (quicbed.client.visual; a cell's ``visual``)
    visual: bool = False

    def host_map(self) -> list[tuple[str, str]]:
        """Every host the page may name and where the arm serves it."""
        return list(self.origins) or [(self.host, self.server_ip)]

    def quic_origins(self) -> list[str]:
        """``host:port`` of every origin the arm must reach over QUIC."""
        if self.origins:
            return [f"{host}:443" for host, _ in self.origins]
        return [f"{self.host}:{self.port}"]

    @property
    def home(self) -> RPath:
        """The browser's throwaway HOME, inside the profile (removed with it)."""
        return self.user_data_dir / "home"

    @property
    def tmpdir(self) -> RPath:
        """The browser's TMPDIR, inside the profile (removed with it): Chromium makes its
        profile's singleton socket in a folder of TMPDIR and removes it only when it
        exits cleanly, which a stopped browser does not (/tmp gained one
        ``org.chromium.Chromium.*`` folder per browser started, 610 in a day of tests)."""
        return self.user_data_dir / "tmp"

    @property
    def nss_db(self) -> RPath:
        """Where a Chromium on Linux reads its NSS database: ``$HOME/.pki/nssdb``."""
        return self.home / ".pki" / "nssdb"


def seed_nss_db(tb: Testbed, spec: BrowserSpec, db_dir: RPath, role: str) -> None:
    """An NSS database in ``db_dir`` on the client with the test CA trusted for TLS
    servers (``C,,``), and nothing else: how a browser that trusts by CA (chromium72,
    Firefox) trusts quicbed's test servers, and only them. ``role`` installs certutil."""
    assert spec.ca_cert is not None  # Browser.check
    db = f"sql:{db_dir}"
    tb.mkdir("client", db_dir)
    for argv in (
        ["certutil", "-N", "-d", db, "--empty-password"],
        ["certutil", "-A", "-d", db, "-n", CA_NICKNAME, "-t", "C,,", "-i", str(spec.ca_cert)],
    ):
        cp = tb.exec("client", argv, check=False)
        if cp.returncode != 0:
            why = (cp.stderr or cp.stdout).strip()[:300]
            raise QuicbedError(
                f"arm {spec.arm}: {' '.join(argv[:2])} failed on "
                f"{tb.name('client')}: {why} (is libnss3-tools installed? roles/{role})"
            )


class Browser(ABC):
    """One browser and its page-load driver for one arm of one cell, on the client role.

    ``launch`` starts the browser (at once; several arms' browsers start side by
    side), ``connect`` waits for it and starts the driver, ``ready`` reads the
    driver's hello; ``load`` measures one page; ``stop`` ends both and removes what
    the profile left.
    """

    #: the registry name (a spec's ``browser:``, ``--browser``, BrowserSpec.client)
    name: ClassVar[str]
    #: how captions, tables and messages name it (its version follows)
    label: ClassVar[str]
    #: what it can be made to speak: h2, h3 (IETF QUIC v1), gquic
    protocols: ClassVar[tuple[str, ...]] = ("h2", "h3")
    #: the page cell modes it can measure (MODES)
    modes: ClassVar[tuple[str, ...]] = MODES
    #: True: it writes a Chromium NetLog (a stack whose evidence is one needs it)
    net_log: ClassVar[bool] = False
    #: True: it writes its own QUIC qlog files (BrowserSpec.qlog_dir)
    qlog: ClassVar[bool] = False
    #: True: it keeps a QUIC server's session ticket, and so resumes and sends 0-RTT to
    #: it, only once the server sent a NEW_TOKEN frame (WebServer.new_token): 0-RTT mode
    #: with a stack that sends none is refused (docs/browsers.md says why for Firefox)
    needs_new_token: ClassVar[bool] = False
    #: True: it trusts the test CA from its own NSS database (needs ``ca_cert``)
    trusts_ca: ClassVar[bool] = False
    #: True: it can load a replayed page, every origin mapped to its own address
    #: (BrowserSpec.origins)
    replays: ClassVar[bool] = False
    #: True: its driver can keep every response's body in the HAR (BrowserSpec.har_content)
    har_content: ClassVar[bool] = False
    #: the component that installs it beyond the base (playbooks/group_vars:
    #: `make setup-NAME`); None: the base
    component: ClassVar[str | None] = None
    #: the repository's files that pin its driver (npm manifests and lock files), which a
    #: replication package carries (quicbed.package.build.repo_paths)
    source_files: ClassVar[tuple[str, ...]] = ()
    #: its CPU map (quicbed.profile.components.own_map): a YAML file beside this
    #: browser's module (None: the kernel's map alone)
    cpu_map_file: ClassVar[str | None] = None
    #: the QUIC transport parameters it can be made to advertise, and why not the others
    #: (quicbed.settings.tparams.check_client; None: none, for no reason given)
    transport_support: ClassVar[tparams.ClientSupport | None] = None

    @classmethod
    def cpu_map(cls) -> dict[str, tuple[str, ...]]:
        """Which component each sampled frame of the browser belongs to (``--profile``)."""
        return own_map(cls)

    #: the program on the client's PATH, and the Ansible role that puts it there
    program: ClassVar[str]
    role: ClassVar[str]

    def __init__(self, spec: BrowserSpec, tb: Testbed, log_dir: Path) -> None:
        self.spec = spec
        self.tb = tb
        self.log_dir = log_dir
        self.process: Process | None = None
        self.driver: subprocess.Popen[str] | None = None
        #: the browser's build as its driver's hello names it, and the whole hello
        self.version = ""
        self.hello: dict[str, Any] = {}
        self._log: RPath | None = None

    # --- what the browser is, asked before anything starts ------------------------------
    @classmethod
    @abstractmethod
    def software(cls, run: Run) -> dict[str, Any] | None:
        """The build of this browser on the client's machine (``run`` asks there), for
        the software check (quicbed.results.provenance); None where it is not installed."""

    @classmethod
    def check(cls, spec: BrowserSpec) -> None:
        """Refuse, naming the value, what ``spec`` asks that this browser cannot do."""
        a = spec.arm
        if spec.protocol not in cls.protocols:
            raise QuicbedError(
                f"arm {a}: browser {cls.name} cannot speak {spec.protocol!r} "
                f"(it speaks {', '.join(cls.protocols)})"
            )
        if spec.quic_version is not None and spec.protocol != "gquic":
            raise QuicbedError(
                f"arm {a}: quic_version {spec.quic_version!r} is for protocol "
                f"gquic, not {spec.protocol!r}"
            )
        if spec.net_log is not None and not cls.net_log:
            raise QuicbedError(
                f"arm {a}: net_log {str(spec.net_log)!r} with browser {cls.name!r}: "
                f"it writes no Chromium NetLog"
            )
        if spec.qlog_dir is not None and not cls.qlog:
            raise QuicbedError(
                f"arm {a}: qlog_dir {str(spec.qlog_dir)!r} with browser {cls.name!r}: "
                f"it writes no qlog of its own"
            )
        if spec.har_content and not cls.har_content:
            raise QuicbedError(
                f"arm {a}: har_content with browser {cls.name!r}: its driver keeps no "
                "response bodies"
            )
        if spec.origins and not cls.replays:
            raise QuicbedError(
                f"arm {a}: browser {cls.name} cannot load a replayed page yet (it maps "
                "one host to the server; docs/replay.md)"
            )
        if cls.trusts_ca and spec.ca_cert is None:
            raise QuicbedError(
                f"arm {a}: browser {cls.name!r} needs ca_cert (it trusts the test CA "
                f"from its own NSS database)"
            )

    @classmethod
    def check_testbed(cls, run: Run, where: str) -> None:
        """Refuse, before anything starts, a client (``run`` asks there; ``where`` names
        it) that lacks this browser: its software probe finds nothing."""
        if cls.software(run) is None:
            raise QuicbedError(
                f"browser {cls.name}: {cls.program} is not installed on {where}; "
                f"install it: {setup_command(cls.component)} (roles/{cls.role})"
            )

    # --- one browser's life ---------------------------------------------------------------
    def start(self, timeout: float = 30) -> None:
        """Launch, connect and wait for the driver's hello (one browser on its own)."""
        self.launch()
        self.connect(timeout)
        self.ready(timeout)

    @abstractmethod
    def launch(self) -> None:
        """Make the profile and start the browser (returns at once)."""

    @abstractmethod
    def connect(self, timeout: float = 30) -> None:
        """Wait until the browser listens for its driver, then start the driver."""

    def ready(self, timeout: float = 30) -> None:
        """The driver's hello: it reached the browser and is ready for loads."""
        hello = self._read(timeout)
        if not hello.get("ready"):
            self.stop()
            raise QuicbedError(
                f"arm {self.spec.arm}: {self.name}'s page-load driver failed: {hello.get('error')}"
            )
        self.hello = hello
        self.version = str(hello.get("browser", ""))
        self.check_hello(hello)

    def check_hello(self, hello: dict[str, Any]) -> None:
        """Refuse (stopping the browser) a hello that shows the wrong browser build;
        any build will do unless a browser pins one."""
        return None

    def _start_driver(self, argv: list[str]) -> None:
        """The page-load driver on the client role, its stderr in the cell's logs."""
        self.driver = subprocess.Popen(
            self.tb.argv("client", argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.log_dir / f"driver-{self.spec.arm}.log", "ab"),  # noqa: SIM115
            text=True,
            bufsize=1,
            preexec_fn=proc._die_with_parent,
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
            **({"content": True} if self.spec.har_content else {}),
            **({"visual": True} if self.spec.visual else {}),
        }
        self.driver.stdin.write(json.dumps(cmd) + "\n")
        self.driver.stdin.flush()
        try:
            return self._read(timeout_s + 30)
        except QuicbedError as exc:
            return {"ok": False, "error": str(exc), "har": None, "nav": None}

    def stop(self) -> None:
        """End the driver (it says goodbye to the browser), then the browser."""
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
        if self.process is not None:
            self.process.stop(timeout=10)
            self.process = None
            self.stopped()

    def stopped(self) -> None:
        """After the browser is gone: remove what it must not leave behind (nothing,
        unless a browser says so: the current Chromium's profile is reseeded)."""
        return None
