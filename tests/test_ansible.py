"""The project's Ansible: syntax, lint, and the local playbook applied twice for real."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml"))


def _run(argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_syntax_check_every_playbook() -> None:
    assert PLAYBOOKS
    for pb in PLAYBOOKS:
        cp = _run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", str(pb)])
        assert cp.returncode == 0, cp.stdout + cp.stderr


def test_ansible_lint_production_profile() -> None:
    cp = _run([str(BIN / "ansible-lint"), "--profile", "production", "playbooks", "roles"])
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_local_playbook_is_idempotent(root: None) -> None:
    """Converge, then converge again: the second run must change nothing."""
    argv = [str(BIN / "ansible-playbook"), "-i", "localhost,", "playbooks/local.yml"]
    first = _run(argv)
    assert first.returncode == 0, first.stdout[-3000:]
    second = _run(argv)
    assert second.returncode == 0, second.stdout[-3000:]
    recap = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", second.stdout)
    assert recap, second.stdout[-2000:]
    assert recap.group(1) == "0", "second run changed something:\n" + "\n".join(
        line for line in second.stdout.splitlines() if line.startswith("changed")
    )
    assert (ROOT / "build" / "bin" / "quicbed-linkem").exists()
