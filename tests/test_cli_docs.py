"""The docs agree with the command line.

docs/cli.md (issue 14, acceptance 3): every command's ``--help`` (the
command line's ``main``, in this process) shows exactly the flags and
arguments that the command's section lists, spelled the same way (``--store
URL``, ``--format {csv,jsonl}``); the commands are the same; and the
configuration keys table lists exactly the keys of the configuration, with
their defaults.

The commands the README and the docs show are run, and must print what the
page shows (issue 25, acceptance 5): see the second half of this file.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from trioplay._cli import main
from trioplay._cli._config import _toml, keys

from .support import CLI_TIMEOUT

DOC = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text(encoding="utf-8")
COMMANDS = [
    "demo",
    "run",
    "runs list",
    "runs show",
    "export",
    "retry",
    "config",
    "timeline",
    "scenario list",
    "scenario run",
    "send-event",
    "resume",
    "cancel",
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


@functools.cache
def _every_help() -> dict[tuple[str, ...], tuple[int, str, str]]:
    """Every command's ``--help``: exit code, stdout and stderr of ``main([*command, "--help"])``.

    In this process, 100 columns wide: the parser is what the text comes
    from, and a process's start-up would cost more than the parsing. The
    installed entry point itself is run by the pages' sessions below
    (``.venv/bin/trioplay --help`` in docs/getting-started.md).
    """
    commands = [(), *((group,) for group in GROUPS), *(tuple(c.split()) for c in COMMANDS)]
    found = {}
    with mock.patch.dict(os.environ, {"COLUMNS": "100"}):
        for command in commands:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main([*command, "--help"])
            found[command] = (code, out.getvalue(), err.getvalue())
    return found


def _help(*command: str) -> str:
    code, out, err = _every_help()[command]
    assert code == 0, err
    return out


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


# -- the commands of the docs, run (issue 25, acceptance 5) ----------------------
#
# Every ```console block of README.md and docs/*.md is run, in order, one
# session per page: a fresh folder that looks like a checkout (examples/ and
# engine/_demo_data/ copied, .venv/ linked), `trioplay` and `python` from the environment
# running the tests. Each `$ command` must exit as the block says (non-zero
# when its output shows an `error:` line, else 0) and print what the block
# shows after it (when it shows anything), compared line by line once what
# changes from run to run is put aside: times and rates, dates, the progress
# lines between a map's start and its `done` line. A line `...` stands for any
# number of lines.
#
# HTML comments, invisible on the rendered page, steer the session:
#   <!-- doc-test: file NAME -->        the next code block is the file NAME
#   <!-- doc-test: output of COMMAND --> the next code block is what COMMAND prints
#   <!-- doc-test: any order -->         the next block's lines may come in any order
#   <!-- doc-test: skip: REASON -->      the next block is not run, for REASON
# `$ export NAME=VALUE` sets NAME for the rest of the session.

REPO = Path(__file__).resolve().parent.parent
RUN_DOCS = ["README.md", "docs/getting-started.md", "docs/cli.md", "docs/authoring.md",
            "docs/scenarios.md"]  # fmt: skip
NOT_RUN = {"docs/benchmarks.md": "its commands run benchmarks for minutes; they are measurements"}
MARK = re.compile(r"^\s*<!-- doc-test: (file|output of|any order|skip)(?::)?\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclass
class Block:
    """One fenced block of a page, with the doc-test mark before it (if any)."""

    kind: str  # the fence's language: console, python, text, ...
    lines: list[str]
    line: int  # where it starts in the page, for messages
    mark: str | None = None
    argument: str = ""


def _blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    mark: tuple[str, str] | None = None
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        marked = MARK.match(line)
        fence = FENCE.match(line)
        if marked:
            mark = (marked.group(1), marked.group(2))
        elif fence:
            indent, kind = fence.group(1), fence.group(2)
            body = []
            index += 1
            while not lines[index].strip().startswith("```"):
                body.append(lines[index][len(indent) :] if lines[index].strip() else "")
                index += 1
            block = Block(kind, body, index - len(body))
            if mark is not None:
                block.mark, block.argument = mark
            blocks.append(block)
            mark = None
        index += 1
    return blocks


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    """The ``$ command`` lines of a console block, each with the lines it shows."""
    found: list[tuple[str, list[str]]] = []
    lines = list(block.lines)
    while lines:
        line = lines.pop(0)
        if not line.startswith("$ "):
            assert found, f"line {block.line}: output before any command: {line!r}"
            found[-1][1].append(line)
            continue
        command = line[2:]
        while command.endswith("\\") or not _complete(command):
            command = command.removesuffix("\\") + "\n" + lines.pop(0)
        found.append((command, []))
    return found


def _complete(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


_VOLATILE = [
    (re.compile(r"\d[\d,]*(\.\d+)? rows/s"), "R rows/s"),
    (re.compile(r"eta [\d:.]+( s)?"), "eta T"),
    (re.compile(r"\b\d+(\.\d+)? s\b"), "T s"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"), "DATE"),
    (re.compile(r"\b1\d{9}\.\d+\b"), "EPOCH"),  # time.time() in a play's output
]
_PROGRESS = re.compile(r"^[\w.-]+: [\d,]+(/[\d,]+)? rows \(")


def _steady(lines: list[str]) -> list[str]:
    """``lines`` without what changes from run to run."""
    kept = []
    for line in lines:
        if _PROGRESS.match(line):
            continue  # a progress line: how many there are depends on the machine
        for pattern, stand_in in _VOLATILE:
            line = pattern.sub(stand_in, line)
        kept.append(line.rstrip())
    return kept


def _matches(expected: list[str], actual: list[str]) -> bool:
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(_matches(expected[1:], actual[skip:]) for skip in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and _matches(expected[1:], actual[1:])


class Session:
    """One page's commands, in a folder of their own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # Copies, not links: the command line shows a path below the current
        # folder as relative, and a link would resolve out of it.
        shutil.copytree(REPO / "examples", folder / "examples")
        shutil.copytree(REPO / "engine" / "_demo_data", folder / "engine" / "_demo_data")
        (folder / ".venv").symlink_to(REPO / ".venv")
        bin_dir = Path(sys.executable).parent
        self.env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "COLUMNS": "80",
            "HOME": str(folder),
            "LANG": "C.UTF-8",
        }

    def run(self, command: str) -> tuple[int, list[str]]:
        if command.startswith("export "):
            name, _, value = command.removeprefix("export ").partition("=")
            self.env[name] = value
            return 0, []
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        return done.returncode, done.stdout.splitlines()

    def check(self, where: str, command: str, shown: list[str], any_order: bool) -> None:
        code, printed = self.run(command)
        expected, actual = _steady(shown), _steady(printed)
        if any_order:
            expected, actual = sorted(expected), sorted(actual)
        failing = any(line.startswith("error: ") for line in shown)
        assert (code != 0) == failing, (
            f"{where}: `{command}` exited {code}; the page shows "
            f"{'an error' if failing else 'success'}:\n" + "\n".join(printed)
        )
        assert not shown or _matches(expected, actual), (
            f"{where}: `{command}` printed something else than the page shows.\n"
            "--- the page:\n" + "\n".join(expected) + "\n--- printed:\n" + "\n".join(actual)
        )


def _run_page(page: str, folder: Path) -> None:
    session = Session(folder)
    blocks = _blocks((REPO / page).read_text(encoding="utf-8"))
    ran = 0
    for block in blocks:
        where = f"{page}:{block.line}"
        if block.mark == "file":
            (folder / block.argument).write_text("\n".join(block.lines) + "\n")
        elif block.mark == "output of":  # the end of what the command prints
            session.check(where, block.argument, ["...", *block.lines], any_order=False)
            ran += 1
        elif block.kind == "console" and block.mark == "skip":
            assert block.argument, f"{where}: a skipped block says why"
        elif block.kind == "console":
            for command, shown in _commands(block):
                session.check(where, command, shown, any_order=block.mark == "any order")
                ran += 1
    assert ran, f"{page} has no command to run"


@pytest.fixture(scope="module")
def pages_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BaseException | None]:
    """Every page's session, the pages side by side (each page's commands in order).

    What each page's session raised, or None: each page's test reports its own.
    """

    def one(page: str) -> BaseException | None:
        try:
            _run_page(page, tmp_path_factory.mktemp(Path(page).stem))
        except BaseException as exc:
            return exc
        return None

    with ThreadPoolExecutor(max_workers=len(RUN_DOCS)) as pool:
        return dict(zip(RUN_DOCS, pool.map(one, RUN_DOCS), strict=True))


@pytest.mark.parametrize("page", RUN_DOCS)
def test_the_commands_of_the_page_do_what_it_shows(
    page: str, pages_run: dict[str, BaseException | None]
) -> None:
    failed = pages_run[page]
    if failed is not None:
        raise failed


def test_every_page_with_commands_is_run() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    with_commands = {
        str(page.relative_to(REPO))
        for page in pages
        if any(block.kind == "console" for block in _blocks(page.read_text(encoding="utf-8")))
    }
    assert with_commands == set(RUN_DOCS) | set(NOT_RUN)
