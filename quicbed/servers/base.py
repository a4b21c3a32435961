"""The adapter every server under test implements.

A server runs on the testbed's ``server`` role, serves one document tree with one
certificate, and keeps a log from which quicbed reads what happened per load (TLS
resumption for Apache, 0-RTT for QUIC). Knobs a server does not support are
errors that name the server, never silently ignored.
"""

from __future__ import annotations

import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.testbed.local import LocalTestbed


@dataclass
class ServeSpec:
    """What every server of a cell serves, identically."""

    docroot: Path
    cert: Path
    key: Path
    logdir: Path
    port: int = 443
    cc: str = "cubic"


class WebServer(ABC):
    name: str
    arm: str  # the protocol a browser must see: h2 or h3
    log_name: str

    def __init__(self, tb: LocalTestbed, spec: ServeSpec) -> None:
        self.tb = tb
        self.spec = spec
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0

    @property
    def log(self) -> Path:
        return self.spec.logdir / self.log_name

    @abstractmethod
    def argv(self) -> list[str]: ...

    def env(self) -> dict[str, str] | None:
        return None

    @abstractmethod
    def ready(self) -> bool:
        """True once the server accepts connections."""

    def start(self, timeout: float = 20) -> None:
        self.spec.logdir.mkdir(parents=True, exist_ok=True)
        self.process = self.tb.spawn(
            "server", self.argv(), log=self.spec.logdir / f"{self.name}.stderr", env=self.env()
        )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                err = (self.spec.logdir / f"{self.name}.stderr").read_text(errors="replace")
                self.stop()
                tail = " | ".join(err.strip().splitlines()[-3:])
                raise QuicbedError(f"{self.name} did not start: {tail or 'no output'}")
            time.sleep(0.05)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            proc.stop_pid(self.process.pid, timeout=10)
            self.process = None

    def mark(self) -> None:
        """Remember where the log ends, so the next ``since_mark`` sees one load's lines."""
        self._offset = self.log.stat().st_size if self.log.exists() else 0

    def since_mark(self) -> list[str]:
        if not self.log.exists():
            return []
        with open(self.log, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        return data.decode(errors="replace").splitlines()

    @abstractmethod
    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        """What the server's own log says about one load (connections, resumption, 0-RTT)."""

    @abstractmethod
    def version(self) -> dict[str, Any]: ...
