"""The documentation's runnable command blocks, run as written.

A fenced block right after a ``<!-- docs:run ...-->`` comment is a terminal
session: each ``$ `` line (with its ``\\`` continuation lines, or a quoted
argument that spans lines) is a command, and the lines up to the next one are
what it prints, stdout then stderr. ``tests/test_docs.py`` runs each marked
block with bash in a scratch directory (``.venv`` linked into it, so
``.venv/bin/grpcurl`` resolves as in a checkout, and ``.venv/bin`` first on
the PATH) and compares what each command printed with the page, after
``Normalised`` blanks what differs on every run (tokens, request ids, pids).
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- docs:run"
_FENCE = re.compile(r"^```[^\n]*\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Command:
    line: str
    """The command as the page writes it (continuations joined by newlines)."""
    expected: list[str]


@dataclass(frozen=True)
class Block:
    page: str
    name: str
    """The marker's first word after ``docs:run``."""
    commands: list[Command]


def _complete(text: str) -> bool:
    """Whether ``text`` is a whole shell command (no open quote or continuation)."""
    if text.endswith("\\"):
        return False
    try:
        shlex.split(text)
    except ValueError:
        return False
    return True


def blocks(page: Path) -> list[Block]:
    """The marked blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    found: list[Block] = []
    start = 0
    while (at := text.find(MARKER, start)) >= 0:
        name = text[at + len(MARKER) :].split()[0]
        match = _FENCE.search(text, at)
        assert match is not None, f"{page.name}: {MARKER} {name} has no block"
        found.append(Block(page.name, name, _commands(match["body"])))
        start = match.end()
    return found


def _commands(body: str) -> list[Command]:
    commands: list[Command] = []
    lines = body.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.startswith("$ "):
            assert not commands, f"output before any command: {line!r}"
            continue
        command = line[2:]
        while not _complete(command) and index < len(lines):
            command += "\n" + lines[index]
            index += 1
        expected: list[str] = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        while expected and not expected[-1].strip():
            expected.pop()
        commands.append(Command(command, expected))
    return commands


@dataclass
class Normalised:
    """What differs on every run, blanked on both sides of the comparison."""

    patterns: list[tuple[re.Pattern[str], str]] = field(
        default_factory=lambda: [
            (re.compile(r"^[A-Za-z0-9_-]{43}$"), "<token>"),
            (re.compile(r'"request_id":"[0-9a-f]{32}"'), '"request_id":"<id>"'),
            (re.compile(r"\bpid \d+"), "pid <pid>"),
            (re.compile(r"/\S*/runstore-\d+\.pid"), "<pid file>"),
        ]
    )

    def __call__(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        for line in lines:
            line = line.rstrip()
            for pattern, replacement in self.patterns:
                line = pattern.sub(replacement, line)
            out.append(line)
        return out


@dataclass
class Ran:
    command: Command
    code: int
    printed: list[str]


async def run(
    command: Command,
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    replace: Mapping[str, str] | None = None,
) -> Ran:
    """``command`` with bash in ``cwd``; ``replace`` rewrites its text first
    (the documented address for the test server's)."""
    link = cwd / ".venv"
    if not link.exists():
        link.symlink_to(ROOT / ".venv")
    text = command.line
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTORE_")}
    environment["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
    environment.update(env or {})
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        text,
        cwd=cwd,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    printed = out.decode().splitlines() + err.decode().splitlines()
    while printed and not printed[-1].strip():
        printed.pop()
    return Ran(command, process.returncode, printed)


def check(ran: Ran, normalised: Normalised | None = None) -> None:
    """What the command printed is what the page shows (normalised)."""
    normalise = normalised or Normalised()
    assert normalise(ran.printed) == normalise(ran.command.expected), (
        f"$ {ran.command.line}\nprinted:\n" + "\n".join(ran.printed)
    )
