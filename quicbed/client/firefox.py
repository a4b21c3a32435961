"""Firefox (Debian's firefox-esr, its own QUIC stack: Mozilla's neqo) as a verified client.

quicbed starts it headless in the client namespace with a throwaway profile per arm
per cell, and drives it over WebDriver BiDi (``client/firefox/load.js``; Firefox's own
Remote Agent, no driver binary). The profile holds only:

- ``user.js`` (``prefs``): HTTP/3 forced to the test origin on an h3 arm (the testing
  alt-svc mapping ``network.http.http3.alt-svc-mapping-for-testing``, no fall-back to
  HTTP/2) and off on an h2 arm; HTTP/3 kept on although the test CA is
  a root Firefox did not ship (by default it turns HTTP/3 off when it finds one); every
  host name resolved to the client's own loopback (``network.dns.native-is-localhost``:
  the driver maps the test host to the server in Firefox's resolver, so nothing else
  leaves the client, Chromium's ``MAP * ~NOTFOUND``); prediction, prefetch and
  speculative connections off; updates, telemetry, remote settings, safe browsing,
  captive-portal and connectivity checks, push, first-run pages off;
- an NSS database (``cert9.db``) with the test CA trusted for TLS servers, and nothing
  else (Firefox reads the profile's database; the SPKI pin is Chromium's).

Its environment: a throwaway HOME and TMPDIR inside the profile; at trace level full,
``SSLKEYLOGFILE`` (NSS writes TLS's and QUIC's secrets there, so a capture decrypts)
and neqo's own qlog, one file per connection (TMPDIR is then the arm's trace folder);
``MOZ_REMOTE_SETTINGS_DEVTOOLS=1``, without which a release build ignores the
profile's remote-settings server and calls Mozilla's at start-up; no crash reporter.
``--remote-allow-system-access`` lets the driver clear the browser between loads with
privileged script, as chrome.benchmarking does in Chromium (the driver's header says
how); the BiDi port listens on the client's loopback only.

docs/browsers.md says what a Firefox load verifies and how it differs from Chromium's.
"""

from __future__ import annotations

import json
import time
from typing import Any

from quicbed.client.browser import Browser, BrowserSpec, seed_nss_db
from quicbed.errors import QuicbedError
from quicbed.paths import DPKG_STATUS, Run, reads
from quicbed.settings import tparams
from quicbed.testbed.lifecycle import RPath

FIREFOX = "firefox-esr"
#: the Debian package quicbed's role installs (its version is in the software record)
PACKAGE = "firefox-esr"
#: the program FIREFOX links to, whose application.ini and platform.ini ``--version``
#: prints from
FIREFOX_DIR = "/usr/lib/firefox-esr"
#: where the Remote Agent writes its WebDriver BiDi address, in the profile
BIDI_FILE = "WebDriverBiDiServer.json"

#: preferences every arm's profile gets, by what they are for (see the module's doc)
QUIET: dict[str, bool | int | str] = {
    # no page but about:blank at start, no first-run or what's-new page
    "browser.startup.page": 0,
    "browser.startup.homepage": "about:blank",
    "browser.startup.homepage_override.mstone": "ignore",
    "startup.homepage_welcome_url": "about:blank",
    "startup.homepage_welcome_url.additional": "",
    "browser.aboutwelcome.enabled": False,
    "browser.shell.checkDefaultBrowser": False,
    "browser.sessionstore.resume_from_crash": False,
    "toolkit.startup.max_resumed_crashes": -1,
    "datareporting.policy.firstRunURL": "",
    "datareporting.policy.dataSubmissionPolicyBypassNotification": True,
    # updates of the browser, its add-ons, plugins (GMP) and search engines
    "app.update.disabledForTesting": True,
    "app.update.auto": False,
    "app.update.checkInstallTime": False,
    "extensions.update.enabled": False,
    "extensions.systemAddon.update.enabled": False,
    "extensions.getAddons.cache.enabled": False,
    "extensions.blocklist.enabled": False,
    "media.gmp-manager.updateEnabled": False,
    "media.gmp-manager.url": "",
    "media.gmp-provider.enabled": False,
    "media.gmp-gmpopenh264.enabled": False,
    "media.gmp-widevinecdm.enabled": False,
    "browser.search.update": False,
    # telemetry, studies, experiments, pings
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.unified": False,
    "toolkit.telemetry.server": "",
    "datareporting.healthreport.uploadEnabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.usage.uploadEnabled": False,
    "app.normandy.enabled": False,
    "app.normandy.api_url": "",
    "app.shield.optoutstudies.enabled": False,
    "messaging-system.rsexperimentloader.enabled": False,
    "nimbus.rollouts.enabled": False,
    "browser.ping-centre.telemetry": False,
    # remote services: settings (CRLite, intermediates, ...), safe browsing, region,
    # geolocation, time, push, accounts, suggestions, new-tab content, ML, translations
    "services.settings.server": "data:,#remote-settings-dummy/v1",
    "security.remote_settings.crlite_filters.enabled": False,
    "security.remote_settings.intermediates.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.safebrowsing.blockedURIs.enabled": False,
    "browser.safebrowsing.provider.mozilla.updateURL": "",
    "browser.safebrowsing.provider.google.updateURL": "",
    "browser.safebrowsing.provider.google4.updateURL": "",
    "browser.region.network.url": "",
    "browser.region.update.enabled": False,
    "browser.search.geoip.url": "",
    "geo.provider.network.url": "",
    "network.sntp.pools": "",
    "dom.push.connection.enabled": False,
    "dom.push.serverURL": "",
    "identity.fxaccounts.enabled": False,
    "browser.urlbar.quicksuggest.enabled": False,
    "browser.urlbar.suggest.searches": False,
    "browser.newtabpage.enabled": False,
    "browser.newtabpage.activity-stream.feeds.system.topstories": False,
    "browser.topsites.contile.enabled": False,
    "browser.ml.enable": False,
    "browser.translations.enable": False,
    # the network's own checks: captive portal, connectivity, MITM detection, OCSP
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "security.certerrors.mitm.priming.enabled": False,
    "security.OCSP.enabled": 0,
    "security.enterprise_roots.enabled": False,
    # the page's clocks at full precision: by default Firefox rounds Navigation and
    # Resource Timing to 1 ms for a page that is not cross-origin isolated
    "privacy.reduceTimerPrecision": False,
    "privacy.reduceTimerPrecision.unconditional": False,
    # name resolution: Firefox's own resolver only (no DNS over HTTPS), every name to
    # the client's loopback (the driver maps the test host to the server)
    "network.trr.mode": 5,
    "network.dns.native-is-localhost": True,
    "network.dns.disablePrefetch": True,
    "network.dns.disablePrefetchFromHTTPS": True,
    # no request the page did not make: the site's icon (a replayed page may name none,
    # and Firefox would ask each origin for /favicon.ico)
    "browser.chrome.site_icons": False,
    # no connection the page did not ask for: predictor, prefetch, speculative connects
    "network.predictor.enabled": False,
    "network.prefetch-next": False,
    "network.http.speculative-parallel-limit": 0,
    "browser.urlbar.speculativeConnect.enabled": False,
    "browser.places.speculativeConnect.enabled": False,
}


def prefs(spec: BrowserSpec) -> dict[str, bool | int | str]:
    """The profile's preferences for one arm: QUIET, and HTTP/3 forced to the test
    origin (h3) or off (h2). Firefox's HTTP/3 takes three settings to behave as
    Chromium's ``--origin-to-force-quic-on``: the testing alt-svc mapping of the host
    to the arm's UDP port (validated, so the first request already goes over QUIC: the
    driver opens the alt-svc store before it); HTTP/3 kept on although the test CA is a
    root Firefox did not ship (by default Firefox turns HTTP/3 off when it finds one);
    and no fall-back to HTTP/2 on a QUIC error (such a load fails instead of being
    measured over TCP; the HAR's protocol check would catch it either way). No TCP
    connection is raced against the QUIC handshake: none was seen at 36 or 112 ms RTT
    (a capture of SYNs during h3 loads; tests/test_firefox.py checks it per load)."""
    out = dict(QUIET)
    if spec.qlog_dir is not None:  # one qlog per connection, in TMPDIR/qlog_<pid>/
        out["network.http.http3.enable_qlog"] = True
    if spec.protocol == "h3":
        out.update(
            {
                "network.http.http3.enable": True,
                # every origin of the page to the arm's UDP port (comma-separated)
                "network.http.http3.alt-svc-mapping-for-testing": ",".join(
                    f"{host};h3=:{spec.port}" for host, _ in spec.host_map()
                ),
                "network.http.http3.disable_when_third_party_roots_found": False,
                "network.http.http3.fallback_to_h2_on_error": False,
                "network.http.http3.enable_0rtt": True,
            }
        )
    else:
        out["network.http.http3.enable"] = False
    return out


def user_js(values: dict[str, bool | int | str]) -> str:
    """``user.js``: one ``user_pref(name, value);`` per preference (JSON literals)."""
    return "".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in values.items())


class Firefox(Browser):
    """Firefox ESR and its WebDriver BiDi page-load driver (``client/firefox/load.js``)."""

    name = "firefox"
    cpu_map_file = "firefox.cpu.yaml"
    #: quicbed sets no Firefox preference for a QUIC transport parameter: neqo advertises
    #: its own values
    transport_support = tparams.ClientSupport(
        "Firefox",
        (),
        dict.fromkeys(tparams.CLIENT_KEYS, "has no setting quicbed drives for it (neqo's own)"),
    )
    source_files = ("client/firefox/package.json", "client/firefox/package-lock.json")
    label = "Firefox"
    protocols = ("h2", "h3")
    trusts_ca = True
    #: its driver maps every origin of a replayed page in Firefox's own resolver
    replays = True
    qlog = True
    #: neqo hands Firefox a session ticket (a "resumption token") when a NEW_TOKEN frame
    #: arrives, or 3 PTO after the ticket on a timer that it does not schedule itself
    #: (Connection::next_delay leaves it out): from a server that sends no NEW_TOKEN the
    #: ticket is kept only if the connection happens to run a later timer, so 0-RTT comes
    #: and goes with the page's size (docs/browsers.md, measured)
    needs_new_token = True
    program = FIREFOX
    role = "firefox_client"
    component = "firefox"

    @classmethod
    def software(cls, run: Run) -> dict[str, Any] | None:
        """By the version it prints and the Debian package's version (a security update
        keeps the ESR's number and changes the package's)."""
        ini = [f"{FIREFOX_DIR}/{name}" for name in ("application.ini", "platform.ini")]
        reads(run, FIREFOX, *ini, DPKG_STATUS)
        version = run([FIREFOX, "--version"])
        if not version:
            return None
        package = run(["dpkg-query", "-W", "-f=${Version}", PACKAGE])
        return {"version": f"{version} ({PACKAGE} {package})" if package else version}

    def launch(self) -> None:
        """A fresh profile (preferences, the test CA), then Firefox (returns at once)."""
        spec, tb = self.spec, self.tb
        self.check(spec)  # refuses a bad spec before anything is made
        values = prefs(spec)
        argv = [
            FIREFOX,
            "--headless",
            "--no-remote",
            "--profile",
            str(spec.user_data_dir),
            "--remote-debugging-port",
            "0",  # any free port; the Remote Agent writes it to BIDI_FILE
            "--remote-allow-system-access",
            "about:blank",
        ]
        tb.remove("client", spec.user_data_dir)
        tb.write_text("client", spec.user_data_dir / "user.js", user_js(values))
        seed_nss_db(tb, spec, spec.user_data_dir, self.role)
        for d in (spec.home, self.tmpdir):
            tb.mkdir("client", d)
        env = {
            "HOME": str(spec.home),
            "TMPDIR": str(self.tmpdir),
            "MOZ_REMOTE_SETTINGS_DEVTOOLS": "1",
            "MOZ_CRASHREPORTER_DISABLE": "1",
        }
        if spec.ssl_key_log:
            env["SSLKEYLOGFILE"] = str(spec.ssl_key_log)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / f"firefox-{spec.arm}.argv.json").write_text(json.dumps(argv))
        (self.log_dir / f"firefox-{spec.arm}.prefs.json").write_text(
            json.dumps(values, indent=1) + "\n"
        )
        self._log = tb.outbox("client", self.log_dir) / f"firefox-{spec.arm}.log"
        self.process = tb.spawn("client", argv, log=self._log, env=env)

    @property
    def tmpdir(self) -> RPath:
        """Firefox's TMPDIR: inside the profile, or the arm's qlog folder when its qlog is
        asked for (Firefox writes it to TMPDIR/qlog_<pid>/; no preference moves it)."""
        return self.spec.qlog_dir or self.spec.user_data_dir / "tmp"

    def connect(self, timeout: float = 30) -> None:
        """Wait for the Remote Agent's WebDriver BiDi port, then start the driver on it."""
        tb, spec = self.tb, self.spec
        assert self.process is not None, "launch() first"
        where = spec.user_data_dir / BIDI_FILE
        deadline = time.monotonic() + timeout
        port = None
        while port is None:
            text = tb.read_text("client", where).strip()
            try:
                port = int(json.loads(text)["ws_port"]) if text else None
            except (ValueError, KeyError, TypeError):
                port = None  # written but not complete yet
            if port is None:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise QuicbedError(
                        f"Firefox did not start on {tb.name('client')} (see {self._log})"
                    )
                time.sleep(0.02)
        load_js = tb.repo_dir("client") / "client" / "firefox" / "load.js"
        # each host the page names and its address (Firefox's resolver takes no port:
        # the arm's UDP port is in the alt-svc mapping)
        maps = [x for host, at in spec.host_map() for x in (host, at.split(":")[0])]
        self._start_driver(["node", str(load_js), str(port), *maps])

    def check_hello(self, hello: dict[str, Any]) -> None:
        if not self.version.startswith("Firefox/"):
            self.stop()
            raise QuicbedError(
                f"arm {self.spec.arm}: the BiDi endpoint on {self.tb.name('client')} is "
                f"{self.version!r}, not Firefox"
            )

    def stopped(self) -> None:
        """The profile (its NSS database, tickets, caches) goes with the browser."""
        self.tb.remove("client", self.spec.user_data_dir)
