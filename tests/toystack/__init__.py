"""A stack that exists only in the test tree: what adding a stack to quicbed takes.

It is a WebServer subclass in a module of its own, as docs/extending.md says; nothing
in quicbed/ names it. Importing this package registers it (the registry finds stacks
as subclasses), so tests import it in a fixture and forget it afterwards.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from quicbed.servers.webserver import Params, WebServer


class ToyParams(Params):
    """One knob of the toy's own, with its own bound, and CUBIC's N typed as quic-go's."""

    window_kb: int | None = Field(default=None, description="the toy's receive window, KiB")
    cubic_n: int | None = Field(default=None, description="CUBIC's emulated connections N")

    @field_validator("window_kb")
    @classmethod
    def _window(cls, v: int | None) -> int | None:
        if v is not None and not 16 <= v <= 65536:
            raise ValueError(f"window_kb must be in [16, 65536] KiB (got {v})")
        return v


class ToyServer(WebServer):
    name = "toy"
    protocol = "h3"
    transport = "udp"
    log_name = "toy.jsonl"
    arms = ("h3-toy",)
    ccs = ("cubic", "toycc")
    Params = ToyParams
    kinds = ("page",)
    colour = "#123456"

    def argv(self) -> list[str]:
        window = self.arm.params.get("window_kb", 1024)
        return ["toy-server", "--port", str(self.arm.port), "--window-kb", str(window)]

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        return {"cc": [self.arm.cc]}

    def version(self) -> dict[str, Any]:
        return {"server": self.name}
