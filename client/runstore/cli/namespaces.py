"""``runstore namespaces create|list|show|update|delete``: the namespaces of a
running server (docs/namespaces.md). Needs an admin token bound to every
namespace ("*")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Final

from runstore.cli import remote
from runstore.cli.output import Output, iso
from runstore.cli.plugins import Command
from runstore.cli.remote import Clients, UsageError
from runstore.client import NamespaceInfo
from runstore.contract.durations import format_duration, parse_duration

HEADERS: Final = ("NAME", "STATE", "CREATED", "DESCRIPTION")

_SETTINGS: Final[tuple[tuple[str, str, Callable[[str], Any], str], ...]] = (
    # (flag, keyword, parse, help)
    ("--description", "description", str, "free text, at most 1024 characters"),
    (
        "--retain-ended-sessions",
        "retain_ended_sessions_s",
        parse_duration,
        "this namespace's --retain-ended-sessions (e.g. 30d)",
    ),
    (
        "--retain-sessionless-runs",
        "retain_sessionless_runs_s",
        parse_duration,
        "this namespace's --retain-sessionless-runs (e.g. 7d)",
    ),
    (
        "--quota-writes-per-s",
        "quota_writes_per_s",
        float,
        "writes per second; calls past it are refused QUOTA_EXCEEDED with a retry delay",
    ),
    (
        "--quota-reads-per-s",
        "quota_reads_per_s",
        float,
        "reads per second; calls past it are refused QUOTA_EXCEEDED with a retry delay",
    ),
    (
        "--quota-watch-streams",
        "quota_watch_streams",
        int,
        "open Watch streams at once; one more is refused QUOTA_EXCEEDED",
    ),
    (
        "--quota-stored-bytes",
        "quota_stored_bytes",
        int,
        "stored bytes; past it new data is refused QUOTA_EXCEEDED (runs may still end)",
    ),
)
"""Each setting's flag, its client keyword, how it parses, and its help."""


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the options give; ``--clear`` ones as None."""
    settings: dict[str, Any] = {}
    for flag, keyword, parse, _ in _SETTINGS:
        text = getattr(args, keyword)
        if text is None:
            continue
        try:
            settings[keyword] = parse(text)
        except ValueError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    for flag in getattr(args, "clear", None) or ():
        keyword = _keyword_of(flag)
        if keyword in settings:
            raise UsageError(f"--clear {flag} and {flag} VALUE contradict each other")
        settings[keyword] = "" if keyword == "description" else None
    return settings


def _keyword_of(flag: str) -> str:
    for name, keyword, _, _ in _SETTINGS:
        if name == f"--{flag}":
            return keyword
    choices = ", ".join(name.removeprefix("--") for name, _, _, _ in _SETTINGS)
    raise UsageError(f"--clear takes one of {choices}, not {flag!r}")


def _row(namespace: NamespaceInfo) -> list[Any]:
    return [
        namespace.name,
        namespace.state,
        iso(namespace.created_at),
        namespace.settings.description,
    ]


def _show(namespace: NamespaceInfo, out: Output) -> None:
    if out.as_json:
        out.json(namespace)
        return
    settings = namespace.settings
    out.fields(
        [
            ("namespace", namespace.name),
            ("state", namespace.state),
            ("created", iso(namespace.created_at)),
            ("updated", iso(namespace.updated_at)),
            ("description", settings.description),
            *(
                (flag.removeprefix("--"), _shown(keyword, getattr(settings, keyword)))
                for flag, keyword, _, _ in _SETTINGS[1:]
            ),
        ]
    )


def _shown(keyword: str, value: Any) -> Any:
    """A setting as its flag takes it: a duration as one (``30d``, not 2592000.0),
    a whole number without ``.0``."""
    if value is None:
        return None
    if keyword.endswith("_s") and not keyword.endswith("_per_s"):
        return format_duration(float(value))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


async def namespaces_create(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    _show(await clients.namespaces.create_namespace(args.name, **_settings(args)), out)
    return 0


async def namespaces_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    def fetch(token: str) -> Any:
        return clients.namespaces.list_namespaces(page_size=args.page_size, page_token=token)

    return await remote.listing(fetch, args, out, HEADERS, _row)


async def namespaces_show(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    _show(await clients.namespaces.get_namespace(args.name), out)
    return 0


async def namespaces_update(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    changes = _settings(args)
    if not changes:
        raise UsageError("give at least one setting to change (or --clear SETTING)")
    _show(await clients.namespaces.update_namespace(args.name, **changes), out)
    return 0


async def namespaces_delete(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    question = (
        f"Delete namespace {args.name}? Its calls are refused at once and all its sessions, "
        "runs, records, memory and contexts are deleted for good; the name is never reused."
    )
    if not remote.confirmed(args, question):
        return remote.not_confirmed()
    deleting = await clients.namespaces.delete_namespace(args.name)
    if out.as_json:
        out.json(deleting)
    else:
        out.console.print(
            f"namespace {deleting.name} is {deleting.state}: its data is being purged"
        )
    return 0


def _setting_options(parser: argparse.ArgumentParser) -> None:
    for flag, keyword, _, help in _SETTINGS:
        parser.add_argument(flag, dest=keyword, metavar="VALUE", help=help)


def add_arguments(namespaces: argparse.ArgumentParser) -> None:
    actions = namespaces.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = remote.action(actions, "create", namespaces_create, "create a namespace")
    create.add_argument("name", metavar="NAME", help="[a-z0-9][a-z0-9-]{0,62}")
    _setting_options(create)
    listing = remote.action(actions, "list", namespaces_list, "namespaces in name order")
    remote.page_options(listing)
    show = remote.action(actions, "show", namespaces_show, "a namespace and its settings")
    show.add_argument("name", metavar="NAME")
    update = remote.action(actions, "update", namespaces_update, "change a namespace's settings")
    update.add_argument("name", metavar="NAME")
    _setting_options(update)
    update.add_argument(
        "--clear",
        action="append",
        metavar="SETTING",
        help="unset a setting, e.g. --clear quota-stored-bytes (repeatable)",
    )
    delete = remote.action(
        actions, "delete", namespaces_delete, "delete a namespace and all its data (asks first)"
    )
    delete.add_argument("name", metavar="NAME")
    remote.add_confirmation(delete)


COMMAND: Final = Command(
    help='create, list, show, update and delete namespaces (admin bound to "*")',
    add_arguments=add_arguments,
    run=remote.run,
)
