"""The software an attempt records is the code its process loaded: a commit or an edit
in the checkout during a sweep of hours does not relabel the later cells."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from quicbed.results import provenance


def _git(repo: Path, *args: str) -> str:
    cp = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return cp.stdout.strip()


def test_git_state_is_the_checkout_at_start_and_says_where_it_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    provenance._git_at_start.cache_clear()
    try:
        assert provenance.git_state() == {"sha": first, "dirty": False}
        (repo / "a.py").write_text("x = 2\n")  # an edit while the sweep runs
        assert provenance.git_state() == {
            "sha": first,
            "dirty": False,
            "now": {"sha": first, "dirty": True},
        }
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
        second = _git(repo, "rev-parse", "HEAD")
        assert second != first
        assert provenance.git_state() == {
            "sha": first,
            "dirty": False,
            "now": {"sha": second, "dirty": False},
        }
    finally:
        provenance._git_at_start.cache_clear()


def test_the_report_labels_a_moved_checkout() -> None:
    from quicbed.report.build import _git_label

    assert _git_label({"sha": "a" * 40, "dirty": False}) == "a" * 12
    moved = {"sha": "a" * 40, "dirty": False, "now": {"sha": "b" * 40, "dirty": True}}
    assert _git_label(moved) == f"{'a' * 12}; checkout at {'b' * 12} (dirty) by then"
