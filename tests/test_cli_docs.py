"""docs/cli.md agrees with the command line (issue 14, acceptance 3).

Every command's ``--help`` (the real entry point, in a subprocess) shows
exactly the flags and arguments that the command's section of docs/cli.md
lists, spelled the same way (``--store URL``, ``--format {csv,jsonl}``); the
commands are the same; and the configuration keys table lists exactly the
keys of the configuration, with their defaults.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from trioplay._cli._config import _toml, keys

from .support import CLI_TIMEOUT, TRIOPLAY

DOC = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text(encoding="utf-8")
COMMANDS = [
    "demo",
    "run",
    "runs list",
    "runs show",
    "export",
    "config",
    "timeline",
    "scenario list",
    "scenario run",
]
GROUPS = ("runs", "scenario")  # commands that have commands of their own
COMMON = "Flags of every command"
TOP = "Flags of `trioplay` alone"


def _sections(level: int) -> dict[str, str]:
    """The doc's sections of heading ``level`` (2 for ``##``), by title; code blocks skipped."""
    found: dict[str, str] = {}
    title = None
    fenced = False
    for line in DOC.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"^(#+) (.*)$", line)
        if heading and len(heading.group(1)) <= level:
            title = heading.group(2).strip() if len(heading.group(1)) == level else None
            if title is not None:
                found[title] = ""
        elif title is not None:
            found[title] += line + "\n"
    return found


def _table(text: str) -> list[list[str]]:
    """The rows of the markdown tables in ``text``, cells stripped, header and rule left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[1:] if rows else rows


def _documented(title: str) -> set[str]:
    """The spellings in the first cells of a section's table: ``--store URL``, ``RUN``, ..."""
    return {
        spelling
        for row in _table(_sections(2)[title])
        for spelling in re.findall(r"`([^`]+)`", row[0])
    }


def _section_of(command: str) -> str:
    [title] = [t for t in _sections(2) if re.fullmatch(rf"`trioplay {command}( [^`]*)?`", t)]
    return title


def _help(*command: str) -> str:
    done = subprocess.run(
        [str(TRIOPLAY), *command, "--help"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _listed(help_text: str, heading: str, indent: int = 2) -> set[str]:
    """What a ``--help`` lists under ``heading``: each flag spelling or argument name."""
    found: set[str] = set()
    inside = False
    for line in help_text.splitlines():
        if not line.startswith(" "):
            inside = line == heading
            continue
        match = re.match(rf"^ {{{indent}}}(\S.*?)(?:\s{{2,}}|$)", line)
        if inside and match:
            found.update(match.group(1).split(", "))
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_of_the_help_is_in_the_doc_and_back(command: str) -> None:
    text = _help(*command.split())
    shown = _listed(text, "options:") | _listed(text, "positional arguments:")
    documented = _documented(_section_of(command)) | _documented(COMMON)
    assert shown == documented, (
        f"in --help only: {sorted(shown - documented)}; "
        f"in docs/cli.md only: {sorted(documented - shown)}"
    )


def test_the_doc_has_every_command_and_no_other() -> None:
    verbs = _listed(_help(), "commands:", indent=4)
    commands = {verb for verb in verbs if verb not in GROUPS}
    for group in GROUPS:
        commands |= {f"{group} {verb}" for verb in _listed(_help(group), "commands:", indent=4)}
    assert commands == set(COMMANDS)
    titled = {t for t in _sections(2) if t.startswith("`trioplay ")}
    assert titled == {_section_of(command) for command in COMMANDS}
    # The top-level command has the common flags, and its own.
    assert _listed(_help(), "options:") == _documented(COMMON) | _documented(TOP)


def test_the_doc_lists_every_configuration_key_with_its_default() -> None:
    rows = _table(_sections(3)["Keys"])
    documented = {row[0].strip("`"): row[1].strip("`") for row in rows}
    assert documented == {key: _toml(default) for key, default in keys()}
