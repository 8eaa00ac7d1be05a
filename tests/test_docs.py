"""The documentation site (docs/, built by ``make docs``) and README.md are
checked against the code, so they cannot drift.

* every JSON example of docs/payloads.md goes through the lifecycle codec;
* every ErrorInfo reason the code registers has a row in docs/errors.md with
  its gRPC code and permanence;
* every contract citation (``§9.3``, ``V1``, ``D5``, ``Q12``) in the tracked
  sources names a heading of docs/;
* every setting of ``runstore serve`` has a row in docs/configuration.md, and
  every ``--flag`` the pages mention is one that a command really takes;
* README.md stays short, links the site's pages, and its Python worker runs;
* nothing tracked points at documents outside the repository.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore.contract import errors, lifecycle

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def pages() -> list[Path]:
    """Every page of the site."""
    return sorted(DOCS.rglob("*.md"))


# --- payloads.md --------------------------------------------------------------------

CODECS: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
    lifecycle.RUN_STARTED: (lifecycle.decode_run_started, lifecycle.encode_run_started),
    lifecycle.RUN_COMPLETED: (lifecycle.decode_run_completed, lifecycle.encode_run_completed),
    lifecycle.RUN_SUSPENDED: (lifecycle.decode_run_suspended, lifecycle.encode_run_suspended),
    lifecycle.CHILD_RUN_LINKED: (
        lifecycle.decode_child_run_linked,
        lifecycle.encode_child_run_linked,
    ),
    lifecycle.CANCELLATION_INTENT: (
        lifecycle.decode_cancellation_intent,
        lifecycle.encode_cancellation_intent,
    ),
}
VERDICTS = ("canonical", "accepted", "rejected")
_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def json_blocks() -> list[tuple[list[str], str]]:
    """(label words after "json", body) of every JSON block of payloads.md."""
    blocks = []
    for match in _FENCE.finditer((DOCS / "payloads.md").read_text(encoding="utf-8")):
        words = match["info"].split()
        if words and words[0] == "json":
            blocks.append((words, match["body"]))
    return blocks


def payload_examples() -> list[tuple[str, str, bytes]]:
    """(record type, verdict, payload) of every labelled payload block."""
    examples = []
    for words, body in json_blocks():
        if len(words) > 1 and words[1].startswith("runstore.v1."):
            continue
        assert len(words) in (2, 3), f"JSON block without a record type: {' '.join(words)!r}"
        kind = words[1]
        verdict = words[2] if len(words) == 3 else "canonical"
        assert kind in CODECS, f"unknown record type {kind!r} in payloads.md"
        assert verdict in VERDICTS, f"unknown verdict {verdict!r} in payloads.md"
        examples.append((kind, verdict, body.rstrip("\n").encode("utf-8")))
    return examples


EXAMPLES = payload_examples()


def test_payloads_md_shows_every_payload_and_status_pairing() -> None:
    canonical = {(kind, body) for kind, verdict, body in EXAMPLES if verdict == "canonical"}
    assert {kind for kind, _ in canonical} == set(CODECS)
    completions = {
        (decoded.status, decoded.phase)
        for kind, body in canonical
        if kind == lifecycle.RUN_COMPLETED
        for decoded in [lifecycle.decode_run_completed(body)]
    }
    assert completions == {("success", "completed"), ("failed", "failed"), ("canceled", "canceled")}
    assert any(verdict == "rejected" for _, verdict, _ in EXAMPLES)


@pytest.mark.parametrize(("kind", "verdict", "payload"), EXAMPLES)
def test_payloads_md_example_matches_the_codec(kind: str, verdict: str, payload: bytes) -> None:
    decode, encode = CODECS[kind]
    if verdict == "rejected":
        with pytest.raises(lifecycle.PayloadError):
            decode(payload)
        return
    decoded = decode(payload)
    if verdict == "canonical":
        # The bytes a Go worker (and runstore.client.records) would write.
        assert encode(decoded) == payload
    else:
        assert encode(decoded) != payload, "an 'accepted' example that is canonical: drop the tag"


REQUESTS = [
    (words[1].removeprefix("runstore.v1."), body)
    for words, body in json_blocks()
    if len(words) > 1 and words[1].startswith("runstore.v1.")
]


@pytest.mark.parametrize(("message", "body"), REQUESTS)
def test_payloads_md_command_parses_and_carries_canonical_payloads(message: str, body: str) -> None:
    from google.protobuf import json_format

    from runstore.v1 import runtime_store_pb2

    request = json_format.Parse(body, getattr(runtime_store_pb2, message)())
    records = [
        getattr(request, name)
        for name in ("started", "canceled", "parent_linked", "record")
        if name in type(request).DESCRIPTOR.fields_by_name and request.HasField(name)
    ]
    assert records
    for record in records:
        decode, encode = CODECS[record.type]
        assert encode(decode(record.payload)) == record.payload


def test_payloads_md_shows_whole_commands() -> None:
    assert {message for message, _ in REQUESTS} >= {
        "StartRootRunRequest",
        "RecordRunTerminalRequest",
    }


# --- errors.md ----------------------------------------------------------------------


def error_rows() -> dict[str, tuple[set[str], str]]:
    """reason -> (gRPC codes, permanent) from the table of docs/errors.md."""
    rows: dict[str, tuple[set[str], str]] = {}
    for line in (DOCS / "errors.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not re.fullmatch(r"`[A-Z_]+`", cells[0]):
            continue
        reason = cells[0].strip("`")
        assert reason not in rows, f"{reason} has two rows in docs/errors.md"
        rows[reason] = ({code.strip() for code in cells[1].split(",")}, cells[2])
    return rows


@pytest.mark.parametrize("reason", sorted(errors.error_classes()))
def test_every_error_reason_has_a_row_in_errors_md(reason: str) -> None:
    cls = errors.error_classes()[reason]
    rows = error_rows()
    assert reason in rows, f"docs/errors.md has no row for {reason}"
    codes, permanent = rows[reason]
    assert cls.code in codes, f"{reason}: docs/errors.md says {codes}, the code says {cls.code}"
    assert permanent == ("yes" if cls.permanent else "no"), reason


def test_errors_md_has_a_row_for_every_error_reason_value_and_no_other() -> None:
    """The proto enum is what clients in other languages see: each of its
    values is explained, and the doc lists no reason the wire does not have."""
    from runstore.v1 import error_reason_pb2

    values = set(error_reason_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}
    assert set(error_rows()) == values


def test_errors_md_codes_are_grpc_status_codes() -> None:
    import grpc

    for reason, (codes, permanent) in error_rows().items():
        assert codes <= set(grpc.StatusCode.__members__), reason
        assert permanent in ("yes", "no"), reason


# --- citations ----------------------------------------------------------------------

_HEADING = re.compile(r"^#{1,6}\s+§?(\d+(?:\.\d+)*|[VDQ]\d+)\b", re.MULTILINE)
_SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
# A rule token standing alone: not part of a word, a path or a version ("V1.2").
_RULE = re.compile(r"(?<![\w./-])([VDQ]\d{1,2})(?![\w/-]|\.\d)")


def tracked_files(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *patterns],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def doc_anchors() -> set[str]:
    anchors: set[str] = set()
    for path in pages():
        anchors.update(_HEADING.findall(path.read_text(encoding="utf-8")))
    return anchors


def citations(text: str) -> set[str]:
    found = set(_SECTION.findall(text))
    found.update(_RULE.findall(text))
    return found


def test_citation_extraction() -> None:
    text = "see §9.3, §6.4 rule 2; V1–V9 and D10 (Q12). §14.16. Not: v2, DV3, D5x, 1.V2, V3.1, a/Q4"
    assert citations(text) == {"9.3", "6.4", "14.16", "V1", "V9", "D10", "Q12"}


def test_every_contract_citation_resolves_to_a_heading_in_docs() -> None:
    anchors = doc_anchors()
    assert {"9.3", "6.4", "V1", "D5", "D8", "Q12", "12", "12.1"} <= anchors
    unresolved = []
    sources = tracked_files("*.py", "*.proto", "*.md")
    for path in sources:
        relative = path.relative_to(ROOT).as_posix()
        if re.fullmatch(r"client/runstore/v1/.*_pb2.*", relative):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for cited in sorted(citations(line) - anchors):
                unresolved.append(f"{relative}:{number}: {cited}")
    assert not unresolved, "citations without a heading in docs/:\n" + "\n".join(unresolved)


# --- nothing points outside the repository ------------------------------------------------

# Spelled so that this file does not match the patterns it looks for.
OUTSIDE = re.compile(r"\.\./shared|STORE_CONTRACT|DECISIONS\.md|upstream_fact[s]|[Ss]eed 004")


def test_no_tracked_file_refers_to_documents_outside_the_repository() -> None:
    offenders = []
    for path in tracked_files():
        relative = path.relative_to(ROOT).as_posix()
        if relative == "tests/test_docs.py":  # it names the patterns it looks for
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, "point these at docs/ instead:\n" + "\n".join(offenders)


README_MAX_LINES = 300


def test_readme_is_short() -> None:
    """The README introduces; the site explains."""
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_readme_links_the_project_documents() -> None:
    readme = README.read_text(encoding="utf-8")
    for target in ("docs/contract.md", "docs/payloads.md", "docs/errors.md", "LICENSE"):
        assert f"]({target})" in readme, target
        assert (ROOT / target).is_file(), target
    assert "](CHANGELOG.md)" in readme and (ROOT / "CHANGELOG.md").is_file()


def test_readme_links_every_page_of_the_site() -> None:
    readme = README.read_text(encoding="utf-8")
    unlinked = [
        path.relative_to(ROOT).as_posix()
        for path in pages()
        if f"]({path.relative_to(ROOT).as_posix()})" not in readme
    ]
    assert not unlinked, f"README.md links no page {unlinked}"


_LINK = re.compile(r"\]\((?!https?://)([^)#\s]+)?(?:#([^)\s]+))?\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_in_the_docs_resolve() -> None:
    broken = []
    for source in [README, *pages()]:
        for target, anchor in _LINK.findall(source.read_text(encoding="utf-8")):
            path = (source.parent / target).resolve() if target else source
            if not path.exists():
                broken.append(f"{source.relative_to(ROOT)}: {target}")
            elif anchor and path.suffix == ".md":
                headings = re.findall(r"^#{1,6}\s+(.+)$", path.read_text(encoding="utf-8"), re.M)
                if anchor not in {github_anchor(heading) for heading in headings}:
                    broken.append(f"{source.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, broken


# --- flags ----------------------------------------------------------------------------


class _Parsed(Exception):
    """Raised instead of parsing: the parser a program built is all we want."""


def parser_of(main: Callable[..., Any], argv: list[str]) -> argparse.ArgumentParser:
    """The argparse parser ``main`` builds, caught when it starts parsing, so the
    check follows the real commands wherever they are defined."""
    caught: list[argparse.ArgumentParser] = []

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        caught.append(self)
        raise _Parsed

    with pytest.MonkeyPatch.context() as patch:
        # parse_args and parse_intermixed_args both go through parse_known_args.
        patch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
        with pytest.raises(_Parsed):
            main(argv)
    return caught[0]


def options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every long option of ``parser`` and of its subcommands, at any depth."""
    for action in parser._actions:
        yield from (name for name in action.option_strings if name.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from options(sub)


def runstore_options() -> set[str]:
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="runstore")
    return set(options(parser_of(entry.load(), [])))


def bench_options() -> set[str]:
    from bench import arms, chain, harness, noisy, retention, triage

    found: set[str] = set()
    for main in (harness.main, chain.main, retention.main, arms.main, noisy.main, triage.main):
        found.update(options(parser_of(main, [])))
    return found


# Flags of other programs the pages show (grpcurl's are single-dash): pg_dump's,
# pg_restore's, protoc's, pip's, npm's, ruff's, mkdocs' and examples/worker.py's.
OTHER_PROGRAMS = {
    "--from-file",  # kubectl's (docs/deploy.md#helm-chart)
    "--format", "--file", "--no-owner", "--dbname", "--go_out", "--go_opt",
    "--go-grpc_out", "--go-grpc_opt", "--prefix", "--group", "--check", "--strict", "--ca",
    "--force-reinstall", "--no-deps", "--to", "--no-access-log",
    # docker, podman and systemctl (docs/deploy.md)
    "--build-arg", "--secret", "--read-only", "--tmpfs", "--signal", "--now",
}  # fmt: skip
# A flag a page names as history ("the flag is now --protections").
RENAMED = {"--chain"}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*[a-z0-9](?![\w-])")


def code_spans(text: str) -> Iterator[str]:
    """The text of every code block and inline code span of a page."""
    for match in _FENCE.finditer(text):
        yield match["body"]
    yield from re.findall(r"`([^`\n]+)`", _FENCE.sub("", text))


def test_every_flag_in_the_docs_exists() -> None:
    import dataclasses

    from runstore.server import config

    # serve, migrate and backup join the runstore command through entry points that
    # build their parsers when called, so their flags come from the settings too.
    serve = {config.flag_name(spec.name) for spec in dataclasses.fields(config.ServerConfig)}
    known = runstore_options() | serve | bench_options() | OTHER_PROGRAMS | RENAMED
    unknown = sorted(
        f"{path.relative_to(ROOT)}: {flag}"
        for path in [README, *pages()]
        for span in code_spans(path.read_text(encoding="utf-8"))
        for flag in _FLAG.findall(span)
        if flag not in known and not flag.startswith("--retain-*")
    )
    assert not unknown, "flags no command takes:\n" + "\n".join(unknown)


def configuration_rows() -> set[str]:
    """The flags named in the first column of the table in docs/configuration.md."""
    flags: set[str] = set()
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        cells = line.strip().strip("|").split("|")
        if line.startswith("| `--"):
            flags.update(re.findall(r"`(--[a-z0-9-]+)`", cells[0]))
    return flags


def test_every_setting_of_serve_has_a_row_in_the_configuration_page() -> None:
    import dataclasses

    from runstore.server import config

    settings = {config.flag_name(spec.name) for spec in dataclasses.fields(config.ServerConfig)}
    rows = configuration_rows()
    assert settings - rows == set(), "settings without a row in docs/configuration.md"
    assert rows - settings - {"--no-access-log"} == set(), "rows that are no setting"


def tables(path: Path) -> Iterator[tuple[int, list[list[str]]]]:
    """Each Markdown table of ``path``: (the line it starts on, its body rows as
    cells), the header and the ``|---|`` line left out."""
    rows: list[list[str]] = []
    start = 0
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate([*lines, ""], start=1):
        if line.lstrip().startswith("|"):
            if not rows:
                start = number
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(rows) > 2 and set(rows[1][0]) <= set("-: "):
            yield start, rows[2:]
        rows = []


def test_tables_reads_each_tables_body_rows(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n| a | b |\n|---|:-:|\n| `x` | 1 |\n| y | 2 |\n\nmore\n| z |\n")
    assert list(tables(page)) == [(3, [["`x`", "1"], ["y", "2"]])]


def test_no_table_of_the_docs_has_a_row_twice() -> None:
    """The same row twice in one table is a copy that will drift; and in a table
    of flags, options or variables (its first column ``--flag`` or
    ``RUNSTORE_*``) each may have one row only."""
    repeated = []
    for path in [*pages(), README]:
        for start, rows in tables(path):
            where = f"{path.relative_to(ROOT)}:{start}"
            lines = ["|".join(row) for row in rows]
            repeated += [f"{where}: {line}" for line in sorted(set(lines)) if lines.count(line) > 1]
            firsts = [row[0] for row in rows]
            if all(first.startswith(("`--", "`RUNSTORE_")) for first in firsts):
                repeated += [
                    f"{where}: {first}" for first in sorted(set(firsts)) if firsts.count(first) > 1
                ]
    assert not repeated, "rows twice in one table:\n" + "\n".join(repeated)


def test_every_flag_has_one_row_in_the_configuration_page() -> None:
    flags = [
        flag
        for _, rows in tables(DOCS / "configuration.md")
        for row in rows
        for flag in re.findall(r"^`(--[a-z0-9-]+)`", row[0])
    ]
    assert sorted(f for f in set(flags) if flags.count(f) > 1) == []


def test_the_help_and_the_page_say_the_same_default() -> None:
    """Each setting's default, as ``runstore serve --help`` shows it, is its row's."""
    import dataclasses

    from runstore.server import config

    defaults: dict[str, str] = {}
    for _, rows in tables(DOCS / "configuration.md"):
        for row in rows:
            for flag in re.findall(r"^`(--[a-z0-9-]+)`", row[0]):
                defaults[flag] = row[1].strip("`")
    for spec in dataclasses.fields(config.ServerConfig):
        default = spec.default
        if isinstance(default, bool) or default in ("", None) or spec.repr is False:
            continue
        flag = config.flag_name(spec.name)
        if isinstance(default, str) and flag in defaults:
            assert defaults[flag] == default, (flag, defaults[flag], default)


def test_the_readme_names_every_service_the_server_serves() -> None:
    from runstore.server.app import SERVICE_NAMES

    numbers = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
    text = README.read_text(encoding="utf-8")
    claim = re.search(r"It serves (\w+) services,(.*?)plus gRPC", text, re.DOTALL)
    assert claim is not None, "README.md no longer says which services it serves"
    assert numbers.get(claim.group(1), -1) == len(SERVICE_NAMES), claim.group(1)
    assert sorted(re.findall(r"`(runstore\.v1\.\w+)`", claim.group(2))) == sorted(SERVICE_NAMES)


def test_the_development_page_names_the_clients_dependencies() -> None:
    """Every runtime dependency of runstore-client (extras aside) is named on
    docs/development.md's line about the two distributions."""
    from packaging.requirements import Requirement

    required = [
        Requirement(line).name
        for line in importlib.metadata.requires("runstore-client") or []
        if "extra ==" not in line
    ]
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    (line,) = [p for p in text.split("\n\n") if p.startswith("Two distributions:")]
    named = {name.lower() for name in re.findall(r"`([A-Za-z0-9_.-]+)`", line)}
    assert {name.lower() for name in required} - named == set(), line


def test_every_missing_migration_number_is_explained() -> None:
    """A number skipped in db/migrations/versions/ is explained on
    docs/upgrades.md and named on each page that lists the revisions."""
    versions = ROOT / "server/runstore/server/db/migrations/versions"
    numbers = {int(path.name[:4]) for path in versions.glob("[0-9][0-9][0-9][0-9]_*.py")}
    missing = [f"{n:04d}" for n in range(1, max(numbers)) if n not in numbers]
    assert missing, "no gap left: drop the explanations this test keeps"
    upgrades = (DOCS / "upgrades.md").read_text(encoding="utf-8")
    for number in missing:
        assert f"There is no revision `{number}`" in upgrades, number
        for page in ("admin-commands.md", "development.md"):
            text = (DOCS / page).read_text(encoding="utf-8")
            assert f"no `{number}`" in text, (page, number)


def test_the_sqlite_synchronous_help_names_every_level() -> None:
    import dataclasses

    from runstore.server import config

    (spec,) = [f for f in dataclasses.fields(config.ServerConfig) if f.name == "sqlite_synchronous"]
    for level in config.SQLITE_SYNCHRONOUS_LEVELS:
        assert level in spec.metadata["help"], level
        assert f"`{level}`" in (DOCS / "configuration.md").read_text(encoding="utf-8"), level


# --- the README's worker ----------------------------------------------------------------

_WORKER_MARKER = "<!-- docs:readme-worker"


def readme_worker() -> str:
    text = README.read_text(encoding="utf-8")
    assert text.count(_WORKER_MARKER) == 1, "README.md lost its worker marker"
    match = _FENCE.search(text, text.index(_WORKER_MARKER))
    assert match is not None and match["info"].strip() == "python"
    return match["body"]


async def test_the_readme_worker_runs_against_a_server(store: Any) -> None:
    import asyncio

    script = readme_worker()
    assert '"127.0.0.1:50051"' in script
    script = script.replace('"127.0.0.1:50051"', repr(store.target))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines() == [
        "start: proceed",
        "appended record 2",
        "run: completed",
    ]


# --- Runnable command blocks (tests/doc_commands.py) ----------------------------------

_DOCUMENTED_TARGET = "127.0.0.1:50051"


def _marked(page: Path, *names: str) -> list[Any]:
    from tests import doc_commands

    found = {block.name: block for block in doc_commands.blocks(page)}
    assert set(names) <= set(found), f"{page.name} lost a docs:run marker: {sorted(found)}"
    return [found[name] for name in names]


def test_every_runnable_block_is_run() -> None:
    """A new ``docs:run`` marker needs a test below that runs its block."""
    from tests import doc_commands

    run_here = {
        "README.md": {"readme-session", "readme-error"},
        "getting-started.md": {"first-calls", "version"},
        "configuration.md": {"bad-value", "bad-durations"},
        "security.md": {"tokens", "principals"},
    }
    marked = {
        page.name: {block.name for block in doc_commands.blocks(page)}
        for page in [README, *pages()]
        if doc_commands.MARKER in page.read_text(encoding="utf-8")
    }
    assert marked == run_here


async def test_the_first_calls_run_as_written(tmp_path: Path) -> None:
    """getting-started.md and README.md: grpcurl against a new SQLite server."""
    from tests import doc_commands
    from tests.processes import server_process

    blocks = [
        *_marked(README, "readme-session", "readme-error"),
        *_marked(DOCS / "getting-started.md", "first-calls", "version"),
    ]
    for server_dir, commands in (
        ("readme", [c for b in blocks[:2] for c in b.commands]),
        ("getting-started", [c for b in blocks[2:] for c in b.commands]),
    ):
        (tmp_path / server_dir).mkdir()
        database = f"sqlite:///{tmp_path / server_dir / 'runstore.db'}"
        async with server_process("--database-url", database) as server:
            for command in commands:
                ran = await doc_commands.run(
                    command, tmp_path / server_dir, replace={_DOCUMENTED_TARGET: server.target}
                )
                doc_commands.check(ran)


async def test_the_configuration_refusals_run_as_written(tmp_path: Path) -> None:
    from tests import doc_commands

    for block in _marked(DOCS / "configuration.md", "bad-value", "bad-durations"):
        for command in block.commands:
            ran = await doc_commands.run(command, tmp_path)
            assert ran.code == 2
            doc_commands.check(ran)
    assert not _created(tmp_path / "var"), "a refused start touched the database"


def _created(directory: Path) -> bool:
    return directory.exists()


async def test_the_auth_commands_and_the_reload_run_as_written(tmp_path: Path) -> None:
    """security.md: the tokens block, then a server on auth.toml, then the
    principals block, whose ``runstore auth reload`` finds it by its default
    pid file (``$TMPDIR``, the port of ``RUNSTORE_LISTEN``)."""
    import asyncio
    import os
    import socket

    from tests import doc_commands
    from tests.processes import server_process

    tokens, principals = _marked(DOCS / "security.md", "tokens", "principals")
    for command in tokens.commands:
        doc_commands.check(await doc_commands.run(command, tmp_path))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{probe.getsockname()[1]}"
    env = {"TMPDIR": str(tmp_path), "RUNSTORE_LISTEN": listen}
    async with server_process(
        "--database-url",
        f"sqlite:///{tmp_path / 'runstore.db'}",
        "--auth-file",
        str(tmp_path / "auth.toml"),
        env={**os.environ, **env},
    ) as server:
        # server_process passes --listen 127.0.0.1:0; the reload finds the
        # server by the port it bound, as RUNSTORE_LISTEN names it.
        env["RUNSTORE_LISTEN"] = server.target
        assert b"2 principals" in server.log
        mark = len(server.log)
        for command in principals.commands:
            doc_commands.check(await doc_commands.run(command, tmp_path, env=env))
        async with asyncio.timeout(30):
            while b"reloaded: 2 principals" not in server.log[mark:]:
                assert server.process.returncode is None, server.log.decode()
                await asyncio.sleep(0.02)


def test_the_development_page_gives_the_chains_order() -> None:
    """docs/development.md names the chain's concerns in the order
    ``interceptors.concerns`` installs them, outermost first (read lag innermost)."""
    from runstore.server.config import ServerConfig
    from runstore.server.interceptors import concerns

    named = {
        "request ids": "RequestIds",
        "authentication": "Authentication",
        "the namespace": "NamespaceResolution",
        "request parsing": "RequestParsing",
        "the database bound": "DatabaseBound",
        "reads that may lag": "ReadLag",
    }
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    (line,) = [p for p in text.split("\n\n") if "Cross-cutting concerns are one" in p]
    line = " ".join(line.split())
    assert all(phrase in line for phrase in named), line
    in_the_page = [named[phrase] for phrase in sorted(named, key=line.index)]
    config = ServerConfig(read_database_url="postgresql://standby/runstore")
    installed = [type(c).__name__ for c in concerns(config) if type(c).__name__ in named.values()]
    assert in_the_page == installed


def test_every_python_file_the_docs_name_exists() -> None:
    """A module the docs point at (`db/opening.py`, `concerns.py`) is a tracked
    file, so a module split or renamed leaves no page naming the old one."""
    modules = [path.relative_to(ROOT).as_posix() for path in tracked_files("*.py")]
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    missing = [
        f"{page.relative_to(ROOT)}: {named}"
        for page in pages
        for named in sorted(set(re.findall(r"`([\w./-]+\.py)`", page.read_text(encoding="utf-8"))))
        if not any(module == named or module.endswith("/" + named) for module in modules)
    ]
    assert missing == [], "\n".join(missing)
