"""The adapter every server under test implements.

A server runs on the testbed's ``server`` role, serves one document tree with one
certificate, and keeps a log from which quicbed reads what happened per load (TLS
resumption for Apache, 0-RTT for QUIC). Knobs a server does not support are
errors that name the server, never silently ignored.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.testbed.base import Process, RPath, Testbed


@dataclass
class ServeSpec:
    """What every server of a cell serves, identically (paths on the server's machine)."""

    docroot: RPath
    cert: RPath
    key: RPath
    logdir: RPath
    port: int = 443
    cc: str = "cubic"
    #: where a QUIC server writes one qlog file per connection (None: no qlog)
    qlog_dir: RPath | None = None


class WebServer(ABC):
    name: str
    arm: str  # the protocol a browser must see: h2 or h3
    transport: str  # tcp or udp: what "accepts connections" means
    log_name: str

    def __init__(self, tb: Testbed, spec: ServeSpec) -> None:
        self.tb = tb
        self.spec = spec
        self.process: Process | None = None
        self._offset = 0

    @property
    def log(self) -> RPath:
        return self.spec.logdir / self.log_name

    @abstractmethod
    def argv(self) -> list[str]: ...

    def env(self) -> dict[str, str] | None:
        """Variables to add to the server's environment."""
        return None

    def ready(self) -> bool:
        """True once the server accepts connections."""
        return self.tb.listening("server", self.transport, self.spec.port)

    def start(self, timeout: float = 20) -> None:
        stderr = self.spec.logdir / f"{self.name}.stderr"
        self.tb.mkdir("server", self.spec.logdir)
        self.process = self.tb.spawn("server", self.argv(), log=stderr, env=self.env())
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                err = self.tb.read_text("server", stderr)
                self.stop()
                tail = " | ".join(err.strip().splitlines()[-3:])
                raise QuicbedError(f"{self.name} did not start: {tail or 'no output'}")
            time.sleep(0.05)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=10)
            self.process = None

    def mark(self) -> None:
        """Remember where the log ends, so the next ``since_mark`` sees one load's lines."""
        self._offset = self.tb.size("server", self.log)

    def since_mark(self) -> list[str]:
        data = self.tb.read_bytes("server", self.log, self._offset)
        return data.decode(errors="replace").splitlines()

    @abstractmethod
    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        """What the server's own log says about one load (connections, resumption, 0-RTT)."""

    @abstractmethod
    def version(self) -> dict[str, Any]: ...
