"""Progress where the output is not a terminal: lines as the work moves, with an ETA.

rich's bar in a log drew nothing for the hours of a sweep, then one frame cut at 80
columns ("0… 0:0…"); quicbed.progress writes lines there instead.
"""

from __future__ import annotations

import io

from rich.console import Console

from quicbed.progress import LineProgress, TimeLeftColumn, clock_span, progress_bar


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _bar(every_s: float = 30) -> tuple[LineProgress, io.StringIO, Clock]:
    buf = io.StringIO()
    clock = Clock()
    console = Console(file=buf, force_terminal=False, width=40)
    return (
        LineProgress(console, every_s=every_s, get_time=clock, wall=lambda: "12:00:00"),
        buf,
        clock,
    )


def test_a_console_that_is_not_a_terminal_gets_lines_and_a_terminal_the_bar() -> None:
    assert isinstance(progress_bar(Console(file=io.StringIO(), force_terminal=False)), LineProgress)
    bar = progress_bar(Console(file=io.StringIO(), force_terminal=True))
    assert not isinstance(bar, LineProgress)


def test_lines_are_throttled_but_a_finish_and_a_sentence_always_show() -> None:
    bar, buf, clock = _bar()
    with bar:
        task = bar.add_task("cells", total=4)
        bar.update(task, completed=0, description="cells: page a (running)")
        clock.t += 60
        bar.update(task, completed=1, description="cells: page b (running)")
        clock.t += 10  # within 30 s of the last line: no line
        bar.update(task, completed=2, description="cells: page c (running)")
        bar.update(task, completed=2, description="cells: page c (running)")  # no move
        bar.update(task, description="waiting for a quiet host")  # a sentence: shown
        bar.update(task, description="waiting for a quiet host")  # said already
        clock.t += 5
        bar.update(task, completed=4)  # the finish: shown
    lines = buf.getvalue().splitlines()
    assert lines == [
        "12:00:00 cells: page a (running): 0/4",
        # a cell in 60 s, three left: 3 min; the line is not cut at the console's width
        "12:00:00 cells: page b (running): 1/4, 0:01:00 for 1, about 0:03:00 left",
        "12:00:00 waiting for a quiet host: 2/4, 0:01:10 for 2, about 0:01:10 left",
        "12:00:00 waiting for a quiet host: 4/4",
    ], lines


def test_a_bar_that_starts_again_takes_its_eta_from_the_new_start() -> None:
    """The sweep's loads bar goes back to 0 at each cell: the ETA is the new cell's."""
    bar, buf, clock = _bar(every_s=0)
    with bar:
        task = bar.add_task("loads", total=1)
        bar.update(task, completed=1, total=10, description="loads (h2)")
        clock.t += 90
        bar.update(task, completed=10, total=10)
        clock.t += 500  # set-up of the next cell
        bar.update(task, completed=1, total=10, description="loads (h3)")
        clock.t += 2
        bar.update(task, completed=2, total=10)
    lines = buf.getvalue().splitlines()
    assert lines == [
        "12:00:00 loads (h2): 1/10",
        "12:00:00 loads (h2): 10/10",
        "12:00:00 loads (h3): 1/10",
        "12:00:00 loads (h3): 2/10, 0:00:02 for 1, about 0:00:16 left",
    ], lines


def test_the_terminal_bar_says_the_eta_of_a_bar_that_moves_minutes_apart() -> None:
    """The terminal bar's ETA is the lines' (rich's own estimates the speed over the last
    30 s, so the sweep's cells bar, moving once a cell, showed none): a cell in 60 s with
    three left is 3 min, and a bar that starts again takes it from the new start."""
    clock = Clock()
    column = TimeLeftColumn()
    bar = progress_bar(Console(file=io.StringIO(), force_terminal=True))
    bar.get_time = clock  # type: ignore[method-assign]
    assert any(isinstance(c, TimeLeftColumn) for c in bar.columns)
    task_id = bar.add_task("cells", total=4)
    task = bar.tasks[0]

    def eta() -> str:
        return column.render(task).plain

    assert eta() == "-:--:--"  # nothing done yet
    clock.t += 60
    bar.update(task_id, completed=1)
    assert eta() == "0:03:00"
    clock.t += 600
    bar.update(task_id, completed=2)
    assert eta() == "0:11:00"  # two cells in 660 s, two left
    bar.update(task_id, completed=0, total=10)  # reused: a new stretch from here
    assert eta() == "-:--:--"
    clock.t += 5
    bar.update(task_id, completed=1)
    assert eta() == "0:00:45"
    bar.update(task_id, completed=10)
    assert eta() == "-:--:--"  # finished


def test_nothing_is_drawn_at_the_end() -> None:
    """rich's frame at the end (cut at 80 columns in a log) is not drawn: the lines said it."""
    bar, buf, _ = _bar()
    with bar:
        bar.add_task("cells", total=3)
    assert buf.getvalue() == ""


def test_clock_span() -> None:
    assert [clock_span(s) for s in (0, 59.6, 3599, 3600 * 7 + 61, -3)] == [
        "0:00:00",
        "0:01:00",
        "0:59:59",
        "7:01:01",
        "0:00:00",
    ]
