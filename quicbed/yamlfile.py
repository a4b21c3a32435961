"""Reading quicbed's YAML files (sweep specs, page sets) strictly, with one-line errors.

PyYAML's safe loader keeps the last of two equal keys without a word: a spec that
names a scenario twice would silently lose the first one, and the sweep would
measure less than the file says. Here a duplicate key is an error naming the key
and both lines. A file that is not UTF-8 text (random bytes, a binary given by
mistake), not a regular file, or absurdly large is refused before parsing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from quicbed.errors import QuicbedError

#: no quicbed YAML file comes near this; a bigger one was given by mistake
MAX_BYTES = 1 << 20
_MERGE = "tag:yaml.org,2002:merge"


#: PyYAML's safe loader on libyaml's parser where PyYAML was built with it (its wheels
#: are): the same constructor, a parser 8 times faster (a catalog check plans 100 specs)
_SAFE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictLoader(_SAFE):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a mapping with the same key twice."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}  # key -> its line
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue  # ``<<: *defaults`` overrides on purpose
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if first is not None:
                raise ConstructorError(
                    problem=f"duplicate key {key!r} (first on line {first + 1})",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _one_line(exc: yaml.YAMLError) -> str:
    """PyYAML's messages span lines (context, mark, snippet); keep the problem and its line."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return f"{where}{exc.problem}"
    return (str(exc).strip().splitlines() or ["unreadable"])[0]


def read_yaml(path: Path) -> Any:
    """The parsed contents of ``path``; every problem is a QuicbedError naming the file."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            raise QuicbedError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise QuicbedError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise QuicbedError(f"{path}: larger than {MAX_BYTES >> 20} MiB; not a quicbed YAML file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QuicbedError(f"{path}: not UTF-8 text (byte {exc.start}); not YAML") from None
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass
    except ConstructorError as exc:
        raise QuicbedError(f"{path}: {_one_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise QuicbedError(f"{path}: not YAML: {_one_line(exc)}") from None
