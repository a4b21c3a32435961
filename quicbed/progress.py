"""The one progress bar of long work: description, bar, count, elapsed and ETA.

On a terminal it is rich's live bar. Where the output is not a terminal (a sweep run
under nohup or ssh with its output in a log, CI) rich draws nothing until the work ends
and then one frame cut at 80 columns: hours of a preset with no sign of life, and an
ETA shown as "0…". There it is :class:`LineProgress` instead: plain lines, each with
the clock time, as the work moves. Both say the same ETA (``Stretch``): rich's own
estimates the speed over the last 30 s, so a bar that moves once a cell, minutes apart,
showed none.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

#: the least time between two lines of one task (its last line, and sentences, aside):
#: a load bar moves every second or so, and a log of a night's sweep stays readable
LINE_EVERY_S = 30.0


def progress_bar(console: Console | None = None, *, transient: bool = False) -> Progress:
    """rich's bar on a terminal, :class:`LineProgress` elsewhere (``transient`` is the
    bar's alone: a log keeps the lines it was given)."""
    console = console or Console()
    if not console.is_terminal:
        return LineProgress(console)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeLeftColumn(),
        console=console,
        transient=transient,
    )


def clock_span(seconds: float) -> str:
    """``H:MM:SS``, as rich's columns show a span."""
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Stretch:
    """The stretch of a task its ETA is taken over: from when it was first seen, or from
    where its count last went back (a bar reused for the next cell's loads starts again
    at 0) or its total changed. The ETA is the stretch's mean rate applied to what is
    left: task lengths vary (a sweep's cells differ by minutes), so it is a mean, not a
    promise."""

    def __init__(self, now: float, completed: float, total: float | None) -> None:
        self.since, self.since_completed = now, completed
        self.completed, self.total = completed, total

    def observe(self, now: float, completed: float, total: float | None) -> None:
        """The task as it stands now: a count gone back or a new total starts a stretch."""
        if completed < self.completed or total != self.total:
            self.since, self.since_completed = now, completed
        self.completed, self.total = completed, total

    def left(self, now: float) -> tuple[float, float, float] | None:
        """The stretch's time, what was done in it and the time left; None where nothing
        was done in it yet, the total is unknown, or the task is finished."""
        done = self.completed - self.since_completed
        if not self.total or done <= 0 or self.completed >= self.total:
            return None
        spent = now - self.since
        return spent, done, spent * (self.total - self.completed) / done


class TimeLeftColumn(ProgressColumn):
    """The terminal bar's ETA, by each task's ``Stretch`` (as LineProgress's lines)."""

    def __init__(self) -> None:
        super().__init__()
        self._stretches: dict[TaskID, Stretch] = {}

    def render(self, task: Task) -> Text:
        now = task.get_time()
        stretch = self._stretches.get(task.id)
        if stretch is None:
            self._stretches[task.id] = stretch = Stretch(now, task.completed, task.total)
        else:
            stretch.observe(now, task.completed, task.total)
        left = stretch.left(now)
        return Text("-:--:--" if left is None else clock_span(left[2]), style="progress.remaining")


@dataclass
class _Said:
    """A task as last seen (to tell a move), what its last line said and when, and the
    stretch its ETA is taken over."""

    seen: tuple[str, float, float | None]
    stretch: Stretch
    line_at: float = -float("inf")
    line_description: str = ""


class LineProgress(Progress):
    """A progress bar as lines, for output that is not a terminal.

    A line is written when a task moves (its count, total or description changed), at
    most every ``every_s`` per task, and always when it reaches its total; a sentence
    (an update of the description alone: a wait for a quiet host) always. Each line:
    the clock time, the description, the count, the time over the stretch the ETA is
    taken from, and the ETA (``Stretch``).
    """

    def __init__(
        self,
        console: Console,
        *,
        every_s: float = LINE_EVERY_S,
        get_time: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = lambda: time.strftime("%H:%M:%S"),
    ) -> None:
        super().__init__(console=console, disable=True, get_time=get_time)
        self._every_s = every_s
        self._wall = wall
        self._said: dict[TaskID, _Said] = {}

    def update(
        self,
        task_id: TaskID,
        *,
        total: float | None = None,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().update(
            task_id,
            total=total,
            completed=completed,
            advance=advance,
            description=description,
            **kwargs,
        )
        sentence = description is not None and total is None and completed is None and not advance
        self._line(task_id, sentence=sentence)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._line(task_id, sentence=False)

    def _line(self, task_id: TaskID, *, sentence: bool) -> None:
        task = next(t for t in self.tasks if t.id == task_id)
        now = self.get_time()
        state = (task.description, task.completed, task.total)
        said = self._said.get(task_id)
        if said is None:
            said = _Said(("", 0, None), Stretch(now, task.completed, task.total))
            self._said[task_id] = said
        else:
            said.stretch.observe(now, task.completed, task.total)
        if state == said.seen:
            return
        said.seen = state
        finished = task.total is not None and task.total > 0 and task.completed >= task.total
        new_sentence = sentence and task.description != said.line_description
        if not (now - said.line_at >= self._every_s or finished or new_sentence):
            return
        said.line_at, said.line_description = now, task.description
        text = f"{self._wall()} {task.description}"
        if task.total:
            text += f": {task.completed:g}/{task.total:g}"
            stretch = said.stretch.left(now)
            if stretch is not None:
                spent, done, left = stretch
                text += f", {clock_span(spent)} for {done:g}, about {clock_span(left)} left"
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
