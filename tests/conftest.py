"""Shared fixtures: real namespaces with a unique prefix, proven gone afterwards; and the
marks that sort the tests into tiers, enforced here rather than trusted.

The marks (declared in pyproject.toml, where --strict-markers refuses any other):
``root`` (root, network namespaces, sysctls, tc, or servers and emulators on the
testbed), ``browser`` (starts Chromium or Chromium 72), ``slow`` (more than a few
seconds), ``built`` (what ``make setup`` builds or installs beyond the venv, such as the
binaries in build/bin). ``make check`` runs the tests that have none of them. And
``parallel``: a root test that times nothing (or only inside tests/lanes.py's ``alone``),
which ``make test`` runs in its parallel lane, beside other tests, rather than in the
lane that runs one test at a time (tests/lanes.py).

A test that uses a fixture of ``NEEDS`` (directly or through another fixture) without
each of that fixture's marks fails before any fixture runs, naming the mark to add (and
one marked ``parallel`` that uses a fixture of ``MEASURES``, naming the fixture); the
``root`` fixture also checks its requesting test's mark itself (a fixture fetched with
``request.getfixturevalue`` is not in a test's signature). So an unmarked test that
would bring up a testbed cannot slip into ``make check``: it fails there, having done
nothing. A test that is not marked ``slow`` yet takes over ``SLOW_SECONDS`` is named in
the summary (named, not failed: a busy machine stretches any test). A test of the
parallel lane that times a receipt, a load or a flow outside ``alone`` fails after its
run, naming what it timed (the time log's lines carry the test's name).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lanes
import pytest
import testtime
from testtime import SuiteClock

from quicbed import timelog
from quicbed.results.linkload import is_replacement, load_proof, spoiled_only
from quicbed.run.cell import CellResult
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.testbed.local import LocalTestbed

#: pytest keeps each test module as rewritten for its assertions in tests/__pycache__, but
#: writes it only where Python may write bytecode: with PYTHONDONTWRITEBYTECODE set (as on
#: this machine and, by its times, CI) every pytest process rewrote all the test modules
#: again, about 5 s of each one's start. Allowed while the test modules are collected,
#: and put back before any test runs (pytest_collection_finish), so nothing a test runs
#: in-process writes bytecode where the user said not to.
_DONT_WRITE_BYTECODE = sys.dont_write_bytecode
sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    sys.dont_write_bytecode = _DONT_WRITE_BYTECODE


ROOT, BROWSER, SLOW, BUILT, PARALLEL = "root", "browser", "slow", "built", "parallel"
#: what a run leaves for CI to keep: report screenshots, the suite's time report
ARTIFACTS = Path(
    os.environ.get("QUICBED_TEST_ARTIFACTS", str(Path(__file__).parent.parent / "test-artifacts"))
)

#: The marks a test needs for using a fixture: by name for this file's fixtures, by
#: (test module, name) for a module's own fixture that brings something up without
#: going through this file's (the module's tests are the only ones that can use it).
NEEDS: dict[str | tuple[str, str], frozenset[str]] = {
    "root": frozenset({ROOT}),
    "prefix": frozenset({ROOT}),
    "testbed": frozenset({ROOT}),
    "cell_1mb_full": frozenset({ROOT, BROWSER, SLOW}),
    "traced_bulk": frozenset({ROOT, SLOW, BUILT}),
    "traced_compete": frozenset({ROOT, SLOW, BUILT}),
    "shared_links": frozenset({ROOT}),
    ("test_chromium72.py", "served"): frozenset({ROOT, BROWSER}),
    ("test_paint.py", "served"): frozenset({ROOT, BROWSER}),
    ("test_package.py", "sweep"): frozenset({ROOT, BROWSER, SLOW}),
    ("test_shard_merge.py", "folders"): frozenset({ROOT, BROWSER, SLOW}),
    ("test_ssh_testbed.py", "lab"): frozenset({ROOT, SLOW}),
    ("test_two_testbeds.py", "labs"): frozenset({ROOT, BROWSER, SLOW}),
    ("test_fresh_machine.py", "machine"): frozenset({ROOT, SLOW}),
    ("test_quiche_server.py", "binary"): frozenset({BUILT}),
}
#: The fixtures that measure (a proven link, a measured cell or sweep, labs whose links
#: are proven): a test that uses one is no test of the parallel lane.
MEASURES: frozenset[str | tuple[str, str]] = frozenset(
    {
        "shared_links",
        "cell_1mb_full",
        "traced_bulk",
        "traced_compete",
        ("test_package.py", "sweep"),
        ("test_shard_merge.py", "folders"),
        ("test_two_testbeds.py", "labs"),
    }
)
#: a test not marked slow that takes longer (setup and call) is named in the summary
SLOW_SECONDS = 5.0

_UNMARKED = pytest.StashKey[str]()


def _missing_marks(item: pytest.Item) -> str | None:
    """What ``item`` lacks for the fixtures it uses, as the message it fails with."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    lacking: dict[str, set[str]] = {}
    for name in getattr(item, "fixturenames", ()):
        if name in params:
            continue  # a parameter of the test, not a fixture
        need = NEEDS.get(name, frozenset()) | NEEDS.get((item.path.name, name), frozenset())
        for mark in need:
            if item.get_closest_marker(mark) is None:
                lacking.setdefault(mark, set()).add(name)
        if item.get_closest_marker(PARALLEL) and {name, (item.path.name, name)} & MEASURES:
            return (
                f"uses {name}, which measures, so it must not be marked @pytest.mark.parallel "
                "(tests/conftest.py MEASURES: make test would run it beside another test)"
            )
    if not lacking:
        return None
    each = "; ".join(
        f"uses {', '.join(sorted(lacking[m]))}, so it must be marked @pytest.mark.{m}"
        for m in sorted(lacking)
    )
    return f"{each} (tests/conftest.py NEEDS: make check must not select it)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        why = _missing_marks(item)
        if why:
            item.stash[_UNMARKED] = why

    # The parallel lane's files of minutes first, one to each worker (they go out in
    # collection order: one of them last would keep the lane waiting on it alone): those
    # with a root test marked parallel, a browser's first (the fresh machine's installs,
    # Firefox's idle minute), then the roles applied to scratch copies and the like.
    def marked(*marks: str) -> set[Path]:
        return {i.path for i in items if all(i.get_closest_marker(m) for m in marks)}

    # Within such a file, its slow tests first: pytest-xdist gives a worker the next file
    # once two of its tests are left, and that file then waits behind them; the fresh
    # machine's quick test ran first, so a file of 104 s waited behind its 220 s and the
    # lane took 337 s, where the fresh machine's worker alone needed 220.
    browser, parallel = marked(PARALLEL, BROWSER), marked(PARALLEL)
    first = {i.path: n for n, i in reversed(list(enumerate(items)))}

    def lane_order(i: pytest.Item) -> tuple[bool, bool, int, bool]:
        slow_last = LANE == "parallel" and i.get_closest_marker(SLOW) is None
        return (i.path not in browser, i.path not in parallel, first[i.path], slow_last)

    items.sort(key=lane_order)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    why = item.stash.get(_UNMARKED, None)
    if why:
        pytest.fail(f"{item.nodeid}: {why}", pytrace=False)


def in_parallel_lane(item: pytest.Item) -> bool:
    """Whether ``make test`` runs ``item`` beside other tests (its first lane)."""
    return item.get_closest_marker(ROOT) is None or item.get_closest_marker(PARALLEL) is not None


@pytest.fixture(autouse=True)
def _lane(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test holds the lane shared (tests/lanes.py) and names itself on the time
    log's lines; a test of the parallel lane that timed a measurement outside
    ``lanes.alone`` fails, naming it."""
    log = Path(os.environ[timelog.ENV]) if os.environ.get(timelog.ENV) else None
    offset = log.stat().st_size if log is not None and log.exists() else 0
    nodeid = request.node.nodeid
    with lanes.share(nodeid):
        yield
    if log is not None and in_parallel_lane(request.node):
        timed = lanes.measured_outside_alone(log, offset, nodeid)
        if timed:
            what = ", ".join(f"{p} x{n}" for p, n in sorted(timed.items()))
            pytest.fail(
                f"{nodeid} timed {what} in make test's parallel lane, beside another test: "
                "mark it root and not parallel, or time it inside lanes.alone()",
                pytrace=False,
            )


#: the lane ``make test`` runs (QUICBED_TEST_LANE: "parallel" for the tests that measure
#: nothing, "serial" for the rest), naming the lane's time report; none outside make test
LANE = os.environ.get("QUICBED_TEST_LANE", "")
TIME_REPORT = ARTIFACTS / f"test-time{'-' + LANE if LANE else ''}"


def pytest_configure(config: pytest.Config) -> None:
    """Every quicbed process of the session logs its phases into one file (the
    suite's time report, tests/testtime.py), unless the caller named one already; the
    session's controller empties it (a pytest-xdist worker inherits it as it is)."""
    global _CLOCK
    log = Path(os.environ.setdefault(timelog.ENV, f"{TIME_REPORT}.jsonl"))
    if log == Path(f"{TIME_REPORT}.jsonl") and "PYTEST_XDIST_WORKER" not in os.environ:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
    _CLOCK = SuiteClock(log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's times, from the reports: in the process that prints the summary,
    which under pytest-xdist is not the one that ran the test."""
    if _CLOCK is not None:
        _CLOCK.add(report)


#: the session's reports and time log (tests/testtime.py)
_CLOCK: SuiteClock | None = None
_STARTED = time.monotonic()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _CLOCK is None:
        return
    over = _CLOCK.unmarked_slow(SLOW_SECONDS)
    if over:
        terminalreporter.section(f"not marked slow, yet over {SLOW_SECONDS:g} s")
        for seconds, nodeid in over:
            terminalreporter.line(f"{seconds:6.1f} s  {nodeid}")
    if _CLOCK.tests:
        summary = _CLOCK.summary(time.monotonic() - _STARTED)
        testtime.write(summary, Path(f"{TIME_REPORT}.json"))
        terminalreporter.section("where the time went")
        for line in testtime.lines(summary):
            terminalreporter.line(line)


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def root(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker(ROOT) is None:
        pytest.fail(
            f"{request.node.nodeid} uses the testbed (fixture root) but is not marked "
            "@pytest.mark.root: make check would select it",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces); CI runs as root")


@pytest.fixture
def prefix(root: None) -> Iterator[str]:
    """A fresh testbed prefix; fails the test if anything of it is left behind."""
    p = "t" + secrets.token_hex(3)
    yield p
    left = {n for n in _netns() if n.startswith(p + "-")}
    if left:
        LocalTestbed(p).down()
        pytest.fail(f"namespaces left behind: {sorted(left)}")


@pytest.fixture
def testbed(prefix: str) -> Iterator[LocalTestbed]:
    tb = LocalTestbed(prefix)
    tb.up()
    yield tb
    tb.down()


class LinkNotHeld(Exception):
    """A test's cell could not be measured because its link failed its receipt or a
    check around the loads: the test checked nothing. pytest-rerunfailures runs such a
    test again after a pause (``only_rerun`` in pyproject.toml matches this name and the
    product's own link-failure messages), as a sweep measures such a cell again; on a
    small shared machine another tenant or process sometimes spoils a receipt, which it
    rightly refuses."""


class SharedLinks:
    """Links proven once for the whole suite and kept, one testbed per link key: the kept
    links of ``quicbed link up`` (quicbed.link.kept), as a user keeps one for the
    commands of an afternoon. A receipt takes 10-40 s and is about half of what a
    one-cell test costs, while what those tests check is the cell, not the link (the
    receipt's own tests measure links): each cell on a kept link opens with a spot check
    instead (a recent closing check serving, as between a sweep's cells). Tests that run
    the command line on a shared link pass ``--prefix`` :meth:`kept_prefix`: their
    commands reuse its receipt as a user's would. A cell that fails on the link (its
    receipt, or its opening or closing check, spoiled on a busy machine) raises
    ``LinkNotHeld`` and takes its link down, to be kept and proven afresh for the test's
    rerun. Not for a test that changes or breaks the link, or that checks what a cell's
    own receipt records."""

    def __init__(self) -> None:
        self._testbeds: dict[str, LocalTestbed] = {}  # link key -> its testbed
        self.prefixes: list[str] = []

    def kept(self, cfg: Any) -> LocalTestbed:
        """The testbed that keeps ``cfg``'s link, kept and proven now if it is not (a
        receipt out of tolerance raises ``LinkNotHeld``)."""
        from quicbed.link import kept
        from quicbed.link.proof import prove
        from quicbed.link.session import shaped_link

        key = cfg.link_key()
        if key not in self._testbeds:
            prefix = "s" + secrets.token_hex(3)
            self.prefixes.append(prefix)
            self._testbeds[key] = LocalTestbed(prefix)
        tb = self._testbeds[key]
        if kept.read(tb) is None:
            with shaped_link(
                tb, cfg.condition, cfg.shaper, cc=cfg.tcp_cc(), offloads_set=cfg.offloads, keep=True
            ) as shaped:
                proven = prove(shaped, 1, cfg.tcp_cc())
            if not proven.receipt.passed:
                failed = "; ".join(c.summary() for c in proven.receipt.failed_checks())
                raise LinkNotHeld(f"the shared link's receipt is out of tolerance: {failed}")
        return tb

    def kept_prefix(self, cond: Any, **cell: Any) -> str:
        """The prefix of the testbed that keeps the link of a cell of ``cond`` (and of any
        setting of the link in ``cell``: shaper, cc, offloads), for a test that runs the
        command line on it."""
        from quicbed.spec.cellconfig import make_cell

        return self.kept(make_cell(condition=cond, page="5kb", **cell)).prefix

    def run_cell(self, cfg: Any, out: Path, **kwargs: Any) -> CellResult:
        """``quicbed.run.cell.run_cell`` on the kept link of ``cfg``'s condition."""
        from quicbed.link.session import take_down
        from quicbed.run.cell import run_cell

        tb = self.kept(cfg)
        kwargs.setdefault("receipt_tcp_seconds", 1)  # past the receipt's age
        r = run_cell(cfg, out, testbed=tb, **kwargs)
        if r.link_failed or (r.reason is not None and r.reason.unmeasured):
            take_down(tb)  # kept and proven afresh when the test runs again
            raise LinkNotHeld(r.problem)
        return r

    def prefix_of(self, cfg: Any) -> str:
        """The prefix of the testbed that carries ``cfg``'s link."""
        return str(self._testbeds[cfg.link_key()].prefix)

    def pids(self) -> set[int]:
        """The shared links' emulators: the processes in their bridge namespaces, which
        stay up between tests. A process left in a shared link's server or client
        namespace is a cell's leftover like any other, and not in this set."""
        found: set[int] = set()
        for p in self.prefixes:
            out = subprocess.run(
                ["ip", "netns", "pids", LocalTestbed(p).ns("bridge")],
                capture_output=True,
                text=True,
            ).stdout
            found |= {int(x) for x in out.split()}
        return found

    def close(self) -> list[str]:
        """Every kept link taken down and its testbed down; what was left behind
        (namespaces, control groups: the emulator's group lives as long as its link, and
        the kept link's record)."""
        from quicbed.link.session import take_down

        left = []
        for tb in self._testbeds.values():
            take_down(tb)
            tb.down()
            left += tb.leftovers() + cgroups_of(tb.prefix)
            if tb.kept_link_path().exists():
                left.append(str(tb.kept_link_path()))
        return left


def cgroups_of(prefix: str) -> list[str]:
    """The control groups' folders of the testbed ``prefix`` on this host
    (quicbed.roles.cgroups): its cells' groups, which go when the testbed goes down."""
    from quicbed.roles import cgroups

    return [
        str(p)
        for point, _, _ in cgroups.mounts()
        for p in Path(point, cgroups.TOP).glob(f"{prefix}-*")
    ]


@pytest.fixture(scope="session")
def shared_links() -> Iterator[SharedLinks]:
    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces); CI runs as root")
    links = SharedLinks()
    try:
        yield links
    finally:
        left = links.close()
    assert not left, f"left behind: {left}"


@pytest.fixture(scope="session")
def cell_1mb_full(
    tmp_path_factory: pytest.TempPathFactory, shared_links: SharedLinks
) -> Iterator[dict[str, Any]]:
    """One real 1 MB cell at level full (10 Mbit/s, 36 ms, 3 runs + 1 warm-up per arm),
    measured once for the whole suite: the capture tests read its captures and key logs,
    ``explain`` its transport traces (full holds light's qlog and TCP samples). Two
    identical cells cost the suite 45 s for nothing either test needs. The capture
    tracers of the returned attempt are kept to read what each capture cost; a receipt
    spoiled on a busy machine raises ``LinkNotHeld`` and the test that asked for the cell
    runs again (``SharedLinks``, whose 10 Mbit/s, 36 ms link it shares). Readers that
    write into a results folder copy it first: ``out`` is shared."""
    import quicbed.run.cell
    from quicbed.model.link import make_condition
    from quicbed.results.store import Store
    from quicbed.spec.cellconfig import make_cell
    from quicbed.traces import instruments
    from quicbed.traces.capture import CaptureTracer

    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces); CI runs as root")
    out = tmp_path_factory.mktemp("full") / "r"
    seen: list[CaptureTracer] = []

    def keep() -> list[Any]:
        made = instruments()
        seen.extend(t for t in made if isinstance(t, CaptureTracer))
        return made

    cfg = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="1mb", runs=3, warmup=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quicbed.run.cell, "instruments", keep)
        r = shared_links.run_cell(cfg, out, traces="full")
    assert r.status == "done", r.problem
    store = Store(out)
    try:
        runs = store.runs(r.cell_id, r.attempt)
    finally:
        store.close()
    # the tracers of this attempt: the last one made
    yield {"out": out, "result": r, "runs": runs, "capture": seen[-1]}


#: the link of the shared transfer cells: the suite's common one (SharedLinks)
TRANSFER_COND = {"rate_mbit": 10, "rtt_ms": 36}


def _traced_transfer(
    tmp_path_factory: pytest.TempPathFactory, links: SharedLinks, name: str, **cell: Any
) -> dict[str, Any]:
    """A transfer cell of h2 and h3 (2 repetitions, no warm-up) traced at light on the
    suite's 10 Mbit/s, 36 ms link, measured once for the whole suite, and its stored
    record (BulkResult or CompeteResult) read back."""
    from made_rows import measured_transfer, unspoiled_flows

    from quicbed.model.link import make_condition
    from quicbed.spec.bulkobjects import object_path
    from quicbed.spec.cellconfig import make_cell

    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces); CI runs as root")
    out = tmp_path_factory.mktemp(name) / "r"
    size = cell["transfer"]["size"]
    cfg = make_cell(
        condition=make_condition(**TRANSFER_COND),
        page=object_path(size),
        warmup=0,
        runs=2,
        **cell,
    )
    r = measured_transfer(cfg, out, links, traces="light")
    if cell["kind"] == "compete":
        spoiled = [run.link.get("reasons") for run in r.runs if run.spoiled]
        if len(r.runs) - len(spoiled) < 2:
            # a repetition the host spoiled and its replacement too: the cell has less
            # than its readers check; measured afresh when the test runs again
            raise LinkNotHeld(f"compete repetitions spoiled on a busy host: {spoiled}")
    else:
        unspoiled_flows(r)  # an arm short of its flows raises LinkNotHeld
    return {"out": out, "result": r}


@pytest.fixture(scope="session")
def traced_bulk(tmp_path_factory: pytest.TempPathFactory, shared_links: SharedLinks) -> Any:
    """One bulk cell (h2, h3: 2 MB, 2 repetitions) traced at light, for every test that
    reads what each flow stores (its window series, its CPU per role, its counters): one
    cell serves them, as one cell of a user's serves every figure of its report. A link
    that fails raises ``LinkNotHeld`` in the test that asked first, which runs again.
    ``out`` is shared: readers that write into it write what any other would (a report)."""
    return _traced_transfer(
        tmp_path_factory,
        shared_links,
        "bulk",
        kind="bulk",
        arms=("h2", "h3"),
        transfer={"size": "2MB"},
    )


@pytest.fixture(scope="session")
def traced_compete(tmp_path_factory: pytest.TempPathFactory, shared_links: SharedLinks) -> Any:
    """One compete cell (an h3 flow against an h2 flow for 3 s, 2 repetitions) traced at
    light, for every test that reads what a repetition stores (its flows' windows, its CPU
    per arm and role, its counters); as :func:`traced_bulk`."""
    flows = (("h3", 1), ("h2", 1))
    return _traced_transfer(
        tmp_path_factory,
        shared_links,
        "compete",
        kind="compete",
        arms=("h3", "h2"),
        transfer={"size": "10MB", "duration_s": 3, "flows": flows, "stagger_s": 0},
    )


def scheduled(runs: list[Any]) -> list[Any]:
    """The loads of a cell's schedule: its runs less the loads measured in place of
    loads the link or host spoiled (quicbed.link.loadproof), which a busy machine adds
    at the end of a cell."""
    return [x for x in runs if not is_replacement(load_proof(x.detail))]


def spoiled(run: Any) -> bool:
    """A load the link or the host spoiled, and nothing else (kept invalid, replaced)."""
    return spoiled_only(load_proof(run.detail))


def stall_emulator(tb: LocalTestbed, after_s: float, for_s: float) -> None:
    """Stop the testbed's link emulator (SIGSTOP) ``after_s`` from now for ``for_s``, from
    a timer thread: a stall the emulator's own clock must see, as a busy host's would."""
    pid = UserspaceShaper().pid(tb)
    assert pid is not None, "no link emulator runs on this testbed"

    def stop_and_go() -> None:
        tb.kill("bridge", pid, "STOP")
        time.sleep(for_s)
        tb.kill("bridge", pid, "CONT")

    threading.Timer(after_s, stop_and_go).start()


#: where the report check keeps each report's screenshot (a test artifact CI can keep)
REPORT_SHOTS = ARTIFACTS / "report-check"


def reads_well(report: Path, name: str) -> None:
    """The report in ``report`` (a folder with index.html) rendered in headless Chromium
    reads as a reader needs (quicbed.report.check): its screenshot kept as ``name``.png."""
    from quicbed.report.check import check_report  # the browser check: browser tests only

    res = check_report(report, REPORT_SHOTS / f"{name}.png")
    assert res.ok, f"{report} ({res.screenshot}):\n" + "\n".join(res.problems)
