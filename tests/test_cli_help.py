"""``quicbed --help`` and each command's help read as written: the terminal wraps them.

typer prints a command's help with rich, which keeps every newline of the help text
inside a paragraph after the first (and inside the first paragraph in a group's
command list). A docstring hard-wrapped at the source's width then breaks sentences in
the middle of a terminal line. These tests render each help at a wide terminal and
require every line of prose to end a paragraph or to be full (the next word did not
fit). Pure tests: no root, no testbed, no browser.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from quicbed.cli import reference as cli_reference
from quicbed.cli.main import app

WIDTH = 200
#: the groups and every command, as ``quicbed`` spells them
PATHS = [
    [],
    ["testbed"],
    ["link"],
    ["pages"],
    *(c.path.split() for c in cli_reference.commands()),
]


def _help(path: list[str], width: int = WIDTH) -> list[str]:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    return res.output.splitlines()


def _hard_breaks(lines: list[str], width: int) -> list[str]:
    """Each line (of one text column ``width`` wide) that a next line of the same
    paragraph continues although that line's first word would have fitted on it."""
    found = []
    for line, after in itertools.pairwise(lines):
        text, following = line.strip(), after.split()
        if text and following and len(text) + 1 + len(following[0]) < width - 2:
            found.append(f"{text!r} / {after.strip()!r}")
    return found


def _description(lines: list[str]) -> list[str]:
    """The prose between the usage line and the first panel."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:"))
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    return lines[start + 1 : end]


def _command_rows(lines: list[str]) -> tuple[list[str], int]:
    """The description column of a group's "Commands" panel (a blank line between two
    commands' help), and its width."""
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands"))
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("╰"):
            break
        rows.append(line[1:-1])
    column = len(rows[0]) - len(rows[0].split(maxsplit=1)[1])  # where the help begins
    out: list[str] = []
    for row in rows:
        if row[:column].strip() and out:  # a command's name: its help begins
            out.append("")
        out.append(row[column:])
    return out, len(rows[0]) - column


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "quicbed")
def test_the_description_is_wrapped_by_the_terminal(path: list[str]) -> None:
    lines = _help(path)
    width = max(map(len, lines))  # the panels' borders span the console (TERMINAL_WIDTH wins)
    assert not _hard_breaks(_description(lines), width), "\n".join(_description(lines))


@pytest.mark.parametrize(
    "path", [[], ["testbed"], ["link"], ["pages"]], ids=["quicbed", "testbed", "link", "pages"]
)
def test_the_command_list_is_wrapped_by_the_terminal(path: list[str]) -> None:
    rows, width = _command_rows(_help(path))
    assert not _hard_breaks(rows, width), "\n".join(rows)


def test_no_help_text_has_a_line_break_inside_a_paragraph() -> None:
    """The source of it all: a command's help and an option's help are one line per
    paragraph (paragraphs apart by a blank line), whatever the docstring's layout."""
    broken = []

    def walk(cmd: Any, path: str) -> None:
        for paragraph in (cmd.help or "").split("\n\n"):
            if "\n" in paragraph.strip("\n"):
                broken.append(f"{path}: {paragraph!r}")
        for p in cmd.params:
            if "\n" in (getattr(p, "help", None) or ""):
                broken.append(f"{path} {p.opts[0]}: {p.help!r}")
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "quicbed")
    assert not broken, "\n".join(broken)


def test_a_cell_compares_any_arms() -> None:
    """``cell`` measures the arms --arms names, not a fixed h2/h3 pair."""
    text = " ".join(" ".join(_help(["cell"])).split())
    assert "h2 and h3" not in text
    assert "--arms" in " ".join(_description(_help(["cell"])))


def test_a_hard_break_is_found() -> None:
    """The check itself: a short line continued by the next is found, a full one not."""
    assert _hard_breaks(["Ask the sweep to stop once", "its cell ends."], 80)
    assert not _hard_breaks(["x" * 74 + " long", "word ends it."], 80)
    assert not _hard_breaks(["One paragraph.", "", "Another."], 80)
