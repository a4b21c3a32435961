"""The catalog of the studies' figures and tables: which quicbed can regenerate, and how.

``sweeps/catalog/catalog.yaml`` names every numbered figure and table of the five studies quicbed
comes from (../shared/studies.md), as ``study/number`` (``long-look-2024/fig4.9b``), with
its status:

- ``local``: runs here. The entry names a preset (``sweeps/<preset>``), the preset's
  scenarios it takes, what it changes in them (``set``: any scenario key, e.g. pages,
  modes, arms, cc, flows; ``pages: single`` or ``multi`` are the study's two page
  grids) and the report view that draws it; ``differs`` says what quicbed's run
  differs in from the study's (stacks, browser versions, emulator, parameters), printed
  with it, and required;
- ``testbed``: needs Emulab or CloudLab nodes; the preset exists and runs there;
- ``not here``: cannot run here, and ``why``.

An entry's sweep is the preset cut down to its scenarios with the changes applied
(:func:`entry_spec`), so its cells are the preset's own wherever it changes nothing:
a full preset run and a reproduced figure share their results (``quicbed merge``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from quicbed.errors import QuicbedError, from_validation
from quicbed.paths import REPO_ROOT
from quicbed.spec.sweepspec import SweepSpec, load_spec, plan
from quicbed.yamlfile import read_yaml

CATALOG = REPO_ROOT / "sweeps" / "catalog" / "catalog.yaml"
PRESETS = REPO_ROOT / "sweeps"
Status = Literal["local", "testbed", "not here"]
#: how the report draws an entry: the protocol heatmaps, the 0-RTT vs 1-RTT heatmaps,
#: the per-cell table (table.csv), the transfer cells' figures and table, the speed-up
#: bins of transfer scenarios against a reference scenario, a cell's explain page (its
#: arms' windows, phases and RTT over one load, from the traces), the window figures of
#: traced transfer flows (quicbed.report.windows), the table of what each client advertised
#: as QUIC transport parameters, the CPU per role with its components and flame graphs
View = Literal[
    "heatmap",
    "mode-heatmap",
    "table",
    "transfers",
    "speedup",
    "explain",
    "windows",
    "advertised",
    "cpu",
]


class Rule(BaseModel):
    """When quicbed's number agrees with the study's: within ``within`` of it (in the
    value's unit), or below ``below``, or above ``above`` (a bound the study's claim
    sets, e.g. "more than 90 % less": below 10 % of the reference). One of the three."""

    model_config = ConfigDict(extra="forbid")
    within: float | None = Field(default=None, ge=0)
    below: float | None = None
    above: float | None = None

    @model_validator(mode="after")
    def _one(self) -> Rule:
        if sum(x is not None for x in (self.within, self.below, self.above)) != 1:
            raise ValueError("a rule is one of within, below or above")
        return self

    def holds(self, quicbed: float, study: float) -> bool:
        if self.within is not None:
            return abs(quicbed - study) <= self.within
        if self.below is not None:
            return quicbed < self.below
        assert self.above is not None
        return quicbed > self.above

    def describe(self, unit: str) -> str:
        u = f" {unit}" if unit else ""
        if self.within is not None:
            return f"within ±{self.within:g}{u}"
        return f"below {self.below:g}{u}" if self.below is not None else f"above {self.above:g}{u}"


class StudyValue(BaseModel):
    """A number the study states (its text or a table), where it says it, and where
    quicbed's counterpart is in a built report: a row of one of its CSV tables chosen by
    column values (``where``), ``column`` (several: summed) times ``scale``; with
    ``relative_to``, as a percentage of the same column in that other row. Judged by
    ``rule`` (quicbed.report.studyvalues)."""

    model_config = ConfigDict(extra="forbid")
    what: str
    study: float
    unit: str
    source: str
    table: Literal["table.csv", "transfers.csv", "profile.csv", "cpu.csv"]
    where: dict[str, str | float]
    column: str | list[str]
    scale: float = 1.0
    relative_to: dict[str, str | float] | None = None
    rule: Rule

    def columns(self) -> list[str]:
        return [self.column] if isinstance(self.column, str) else list(self.column)


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    what: str
    kind: str
    status: Status
    why: str | None = None
    preset: str | None = None
    scenarios: list[str] | None = None
    set: dict[str, Any] | None = None
    view: View | None = None
    differs: str | None = None
    #: the study's own numbers this entry compares with quicbed's (local entries)
    compare: list[StudyValue] = Field(default_factory=list)

    @property
    def study(self) -> str:
        return self.id.split("/", 1)[0]

    @model_validator(mode="after")
    def _shape(self) -> Entry:
        runs = self.status in ("local", "testbed")
        if runs and not (self.preset and self.scenarios and self.view):
            raise ValueError(f"{self.id}: a {self.status} entry needs preset, scenarios and view")
        if self.status == "local" and not (self.differs or "").strip():
            # every run here differs from the study's in something (stacks, versions,
            # emulator, machine): said per entry, or a reader takes it for the study's
            raise ValueError(f"{self.id}: a local entry says how its run differs from the study's")
        if not runs and (self.preset or not self.why):
            raise ValueError(f"{self.id}: a 'not here' entry gives why, and no preset")
        if self.compare and self.status != "local":
            raise ValueError(f"{self.id}: only a local entry compares study values")
        return self


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: int
    #: the study's two page grids, by the names an entry's ``set: {pages: ...}`` uses
    grids: dict[str, list[str]]
    entries: list[Entry]

    @model_validator(mode="after")
    def _unique(self) -> Catalog:
        seen: set[str] = set()
        for e in self.entries:
            if e.id in seen:
                raise ValueError(f"entry {e.id} is listed twice")
            seen.add(e.id)
        return self

    def studies(self) -> list[str]:
        return list(dict.fromkeys(e.study for e in self.entries))

    def find(self, key: str) -> list[Entry]:
        """The entry ``key`` names, every panel of a figure it names (``fig4.7``: fig4.7a,
        b and c), or every entry of the study it names; an error naming the key and the
        nearest choices otherwise."""
        exact = [e for e in self.entries if e.id == key]
        if exact:
            return exact
        if key in self.studies():
            return [e for e in self.entries if e.study == key]
        panels = [e for e in self.entries if "/" in key and e.id[: len(key)] == key]
        if panels and all(e.id[len(key) :].isalpha() for e in panels):  # fig4.7: a, b, c
            return panels
        near = [e.id for e in self.entries if e.id.startswith(key.split("/")[0] + "/")]
        hint = f"; {key.split('/')[0]} has {', '.join(near[:8])}" if near else ""
        raise QuicbedError(
            f"reproduce: no figure, table or study {key!r} in the catalog (studies: "
            f"{', '.join(self.studies())}{hint}; quicbed reproduce --list shows them all)"
        )


def load_catalog(path: Path = CATALOG) -> Catalog:
    data = read_yaml(path)
    try:
        return Catalog(**data)
    except ValidationError as exc:
        raise from_validation(exc, str(path)) from None


def entry_spec(cat: Catalog, entry: Entry) -> SweepSpec:
    """The sweep that regenerates ``entry``: its preset cut down to its scenarios, each
    with the entry's changes, under the preset's scenario names."""
    return entries_spec(cat, [entry])


def entries_spec(cat: Catalog, entries: list[Entry]) -> SweepSpec:
    """One sweep for several entries of one preset (a study's, ``reproduce STUDY``):
    each entry's scenarios named ``<figure>: <scenario>`` (``fig4.6a: baseline``), so
    every heatmap says which figure it is; a cell two entries share is measured once.
    One entry keeps the preset's names."""
    presets = {e.preset for e in entries}
    if len(presets) != 1 or None in presets:
        raise QuicbedError("catalog: one sweep is made of entries of one preset")
    preset_file = str(entries[0].preset)
    preset = load_spec(PRESETS / preset_file)
    body = preset.model_dump(mode="json", exclude_unset=True)
    scenarios: dict[str, Any] = {}
    for entry in entries:
        if entry.scenarios is None:
            raise QuicbedError(f"reproduce {entry.id}: cannot run here: {entry.why}")
        missing = [s for s in entry.scenarios if s not in preset.scenarios]
        if missing:
            raise QuicbedError(
                f"catalog entry {entry.id}: preset {preset_file} has no scenario "
                f"{', '.join(missing)} (it has {', '.join(preset.scenarios)})"
            )
        changes = _changes(cat, entry)
        own = changes.pop(PER_SCENARIO, {})
        unknown = sorted(set(own) - set(entry.scenarios))
        if unknown:
            raise QuicbedError(
                f"catalog entry {entry.id}: set.{PER_SCENARIO} names {', '.join(unknown)}, "
                f"not among its scenarios ({', '.join(entry.scenarios)})"
            )
        for name in entry.scenarios:
            key = name if len(entries) == 1 else f"{entry.id.split('/', 1)[1]}: {name}"
            scenarios[key] = {**body["scenarios"][name], **changes, **own.get(name, {})}
    # speed-ups are against a scenario of the sweep: renamed with it, dropped without it
    stats = body.setdefault("statistics", {})
    ref = stats.get("speedup_against")
    if ref is not None:
        named = [k for k in scenarios if k == ref or k.endswith(f": {ref}")]
        if len(named) == 1:
            stats["speedup_against"] = named[0]
        else:
            stats.pop("speedup_against")
    one = entries[0].id if len(entries) == 1 else f"{len(entries)} entries of {entries[0].study}"
    body.update(
        name=f"{preset.name}: {one}",
        description=entries[0].what if len(entries) == 1 else preset.description,
        scenarios=scenarios,
    )
    try:
        spec = SweepSpec(**body)
    except ValidationError as exc:
        raise from_validation(exc, f"catalog: {one}") from None
    plan(spec, source=f"catalog: {one}")  # every cell valid, before anything runs
    return spec


#: an entry's ``set`` key for changes to one of its scenarios only (a variant that needs
#: other arms than the rest: transport-params fig5.1a's windows scaled to this link)
PER_SCENARIO = "per_scenario"


def _changes(cat: Catalog, entry: Entry) -> dict[str, Any]:
    """The entry's scenario changes, its page grid by name resolved."""
    changes = dict(entry.set or {})
    pages = changes.get("pages")
    if isinstance(pages, str):
        if pages not in cat.grids:
            raise QuicbedError(
                f"catalog entry {entry.id}: pages {pages!r} is no grid ({', '.join(cat.grids)})"
            )
        changes["pages"] = cat.grids[pages]
    return changes
