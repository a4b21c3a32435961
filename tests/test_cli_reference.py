"""README.md and docs/cli.md document every command and every flag, as the CLI has them."""

from __future__ import annotations

from quicbed.cli import reference as ref


def test_readme_names_every_flag_of_every_command() -> None:
    """Walks the CLI: each command's synopsis in README.md names each of its flags."""
    sections = ref.readme_sections(ref.README.read_text())
    missing = []
    for cmd in ref.commands():
        text = sections.get(cmd.path)
        if text is None:
            missing.append(f"quicbed {cmd.path} (the whole command)")
            continue
        words = set(text.replace("[", " ").replace("]", " ").replace("/", " ").split())
        for flag in cmd.flags:
            for name in flag.names if not flag.argument else ():
                if name not in words and f"{name}..." not in words:
                    missing.append(f"quicbed {cmd.path} {name}")
    assert not missing, (
        "README.md does not document: "
        + ", ".join(missing)
        + "; run python -m quicbed.cli.reference"
    )


def test_readme_reference_is_current() -> None:
    text = ref.README.read_text()
    assert ref.with_readme_block(text) == text, "run python -m quicbed.cli.reference"


def test_docs_cli_is_current() -> None:
    assert ref.DOC.read_text() == ref.doc(), "run python -m quicbed.cli.reference"


def test_the_flags_the_issue_found_undocumented_are_documented() -> None:
    readme = ref.README.read_text()
    for flag in (
        "--replace",
        "--force",
        "--max-hours",
        "--shaper",
        "--ssh-user",
        "--ssh-key",
        "--prefix",
        "--receipt-tcp-seconds",
    ):
        assert flag in readme, flag
