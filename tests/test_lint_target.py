"""`make lint` type-checks the package with mypy and lints both Go modules with a
pinned golangci-lint; the mypy settings name only modules that exist."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from quicbed.paths import REPO_ROOT


def _lint_recipe() -> list[str]:
    # -n prints the recipe, expanded, without running it (nor its prerequisites)
    cp = subprocess.run(
        ["make", "-n", "-C", str(REPO_ROOT), "--no-print-directory", "lint"],
        capture_output=True,
        text=True,
        check=True,
    )
    return cp.stdout.splitlines()


def test_lint_runs_mypy_and_golangci_lint_on_both_go_modules() -> None:
    lines = _lint_recipe()
    assert any(re.search(r"(^|/)mypy$", line) for line in lines), lines
    runs = [line for line in lines if "golangci-lint run" in line]
    assert [line.split(" && ")[0] for line in runs] == ["cd go", "cd go/gquic"], runs
    for line in runs:
        # the config at the top, the patched quic-go through a workspace
        assert f"--config {REPO_ROOT}/.golangci.yml" in line
        assert re.search(r"GOWORK=\S+\.work ", line), line


def test_golangci_lint_version_is_pinned() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    m = re.search(r"^GOLANGCI_LINT_VERSION := (\S+)$", makefile, re.M)
    assert m and re.fullmatch(r"v2\.\d+\.\d+", m.group(1)), "a v2.x.y release, not latest"
    assert "golangci-lint@$(GOLANGCI_LINT_VERSION)" in makefile
    assert re.search(r'^version: "2"$', (REPO_ROOT / ".golangci.yml").read_text(), re.M)


def test_mypy_is_pinned_like_the_rest() -> None:
    reqs = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    assert any(re.fullmatch(r"mypy==[\d.]+", line) for line in reqs)


def _module_exists(name: str) -> bool:
    if name.endswith(".*"):
        return (REPO_ROOT / name[:-2].replace(".", "/") / "__init__.py").is_file()
    path = REPO_ROOT / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@pytest.mark.parametrize(
    "override",
    tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"],
    ids=lambda o: ",".join(o["module"])[:40],
)
def test_mypy_overrides_name_real_modules(override: dict[str, object]) -> None:
    modules = override["module"]
    assert isinstance(modules, list)
    ours = [m for m in modules if m.split(".")[0] == "quicbed"]
    missing = [m for m in ours if not _module_exists(m)]
    assert not missing, f"pyproject.toml's mypy settings name modules that do not exist: {missing}"


def test_every_module_is_type_checked_strictly() -> None:
    """A new module is strict from its first commit: every module of the package and of
    tools/ matches a pattern of the strict override in pyproject.toml."""
    import fnmatch
    import pkgutil

    import quicbed

    cfg = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = next(o["module"] for o in cfg["overrides"] if o.get("disallow_untyped_defs"))
    modules = ["quicbed"] + [m.name for m in pkgutil.walk_packages(quicbed.__path__, "quicbed.")]
    modules += [p.stem for p in (REPO_ROOT / "tools").glob("*.py")]
    loose = [m for m in modules if not any(fnmatch.fnmatch(m, pat) for pat in strict)]
    assert loose == [], f"add to the strict mypy override in pyproject.toml: {loose}"
