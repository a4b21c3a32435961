"""The page models' definitions (workloads/replay-models.yaml), validated.

A model states a page's shape as counts and bytes per content type and a number of
first- and third-party hosts, each figure taken from (or, where none was found, assumed
beside) HTTP Archive's percentiles; quicbed.replay.corpus builds the page. Checked here,
before anything is built, is only what the numbers alone can tell: a model the builder
could not make (more origins than the testbed has addresses, a type whose bytes cannot
hold its count of files) is refused by name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from quicbed.errors import QuicbedError, from_validation
from quicbed.paths import REPO_ROOT
from quicbed.replay.archive import MAX_ORIGINS
from quicbed.yamlfile import read_yaml

MODELS_FILE = REPO_ROOT / "workloads" / "replay-models.yaml"
Kind = Literal["html", "css", "js", "font", "image", "json"]
KINDS: tuple[Kind, ...] = ("html", "css", "js", "font", "image", "json")
#: the first-party hosts, in the order a model takes them (first_party_hosts of them)
FIRST_PARTY = ("www", "static", "img", "api")
#: each iframe's document (every HTML request but the main document's), in bytes
IFRAME_BYTES = 2048


class Budget(BaseModel):
    """``count`` responses of one content type, ``kb`` of bytes in all."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count: int = Field(ge=0)
    kb: int = Field(ge=0)


class PageModel(BaseModel):
    """One model page: its percentile and client as cited, its types and hosts."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    percentile: int = Field(ge=1, le=99)
    client: Literal["mobile", "desktop"]
    first_party_hosts: int = Field(ge=1, le=len(FIRST_PARTY))
    third_party_hosts: int = Field(ge=0)
    types: dict[Kind, Budget]

    @model_validator(mode="after")
    def _buildable(self) -> PageModel:
        missing = [k for k in KINDS if k not in self.types]
        if missing:
            raise ValueError(f"types: {missing[0]} is missing (give all of {', '.join(KINDS)})")
        least = ["html", "css", "js", "image"]  # main document, its style, app.js, hero
        least += ["json"] if self.first_party_hosts == len(FIRST_PARTY) else []  # api's feed
        for kind in least:
            if self.types[kind].count < 1:  # type: ignore[index]
                raise ValueError(f"types.{kind}: a model page has at least one")
        for kind, b in self.types.items():
            if b.count and b.kb * 1024 < 512 * b.count:
                raise ValueError(f"types.{kind}: {b.kb} KB cannot hold {b.count} files")
        html = self.types["html"]
        if html.kb * 1024 - IFRAME_BYTES * (html.count - 1) < 4096:
            raise ValueError(f"types.html: {html.kb} KB leaves the main document under 4 KB")
        if self.origins > MAX_ORIGINS:
            raise ValueError(f"{self.origins} origins; the testbed has {MAX_ORIGINS} addresses")
        return self

    @property
    def origins(self) -> int:
        return self.first_party_hosts + self.third_party_hosts

    @property
    def requests(self) -> int:
        return sum(b.count for b in self.types.values())


class ModelSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal[1]
    kb: Literal[1024]
    third_party_share: float = Field(ge=0, lt=1)
    models: dict[str, PageModel]

    @model_validator(mode="after")
    def _shares(self) -> ModelSet:
        for name, m in self.models.items():
            if third_party_requests(self, m) < m.third_party_hosts:
                raise ValueError(
                    f"models.{name}: {m.third_party_hosts} third-party hosts but only "
                    f"{third_party_requests(self, m)} third-party requests"
                )
        return self


def third_party_requests(ms: ModelSet, m: PageModel) -> int:
    """How many of a model's requests go to third parties (round half up)."""
    return int(ms.third_party_share * m.requests + 0.5)


def load(path: Path = MODELS_FILE) -> ModelSet:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise QuicbedError(f"{path}: a model set is a mapping (format, kb, models)")
    try:
        return ModelSet.model_validate(data)
    except ValidationError as exc:
        raise from_validation(exc, str(path)) from None


def check_models(names: list[str], ms: ModelSet) -> list[str]:
    """``names`` (all models when empty), each one defined, else an error naming it."""
    for n in names:
        if n not in ms.models:
            raise QuicbedError(f"unknown page model {n!r} (defined: {', '.join(ms.models)})")
    return names or list(ms.models)


def fingerprint(name: str, m: PageModel, ms: ModelSet) -> str:
    """SHA-256 of what a model's page is made from (its figures and the shared share)."""
    text = json.dumps(
        {"name": name, "model": m.model_dump(mode="json"), "share": ms.third_party_share},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode()).hexdigest()
