"""``runstore auth``: manage the principals of a server's ``--auth-file``
(``docs/security.md#managing-principals``).

It edits the file (``runstore.contract.auth_file``) on the machine it runs on
and calls no server: a running server loads the change on SIGHUP, which
``runstore auth reload`` sends it (found by its pid file,
``runstore.contract.pid_file``). Every write
replaces the file atomically and keeps its mode. A new token is printed once,
on stdout, or written to ``--token-out FILE`` (mode 0600); ``list`` never shows
a token or a hash.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from runstore.cli.plugins import Command
from runstore.contract.auth_file import (
    DEFAULT_NAMESPACES,
    ROLES,
    AuthFileError,
    add_certificates,
    add_token,
    kind,
    new_token,
    read_auth_file,
    remove_principal,
    rotate_token,
)
from runstore.contract.pid_file import DEFAULT_LISTEN

RELOAD_HINT: Final = "runstore auth reload makes a running server load it"


class AuthUsageError(Exception):
    """A mistake in the options or the file: one line on stderr, exit code 2."""


def _role(text: str | None) -> str | None:
    if text is not None and text not in ROLES:
        raise AuthUsageError(f"--role must be one of {', '.join(sorted(ROLES))}, not {text!r}")
    return text


class TokenOut:
    """Where a new token goes: stdout, or ``--token-out FILE`` created with mode
    0600 (an existing file only with ``--force``). The file is checked before the
    auth file changes; it appears only once the auth file names the token."""

    def __init__(self, path: str | None, force: bool) -> None:
        self.path = Path(path) if path is not None else None
        self.force = force
        if self.path is None:
            return
        if self.path.exists() and not force:
            raise AuthUsageError(
                f"--token-out {self.path} exists; pass --force to overwrite it "
                "(the token it holds stops working only when removed or rotated)"
            )
        if not self.path.parent.is_dir():
            raise AuthUsageError(f"--token-out {self.path}: no such directory {self.path.parent}")

    def prepare(self, token: str) -> None:
        """Writes ``token`` to a private temporary file beside FILE, before the
        auth file names it; ``commit`` puts it in place, ``discard`` drops it."""
        self._temporary: str | None = None
        if self.path is None:
            return
        descriptor, self._temporary = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}."
        )
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def commit(self) -> None:
        if self.path is None or self._temporary is None:
            return
        if self.force:
            os.replace(self._temporary, self.path)
        else:
            try:
                os.link(self._temporary, self.path)  # refuses a file that appeared meanwhile
            finally:
                os.unlink(self._temporary)
        self._temporary = None

    def discard(self) -> None:
        if self._temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temporary)
            self._temporary = None

    def show(self, token: str) -> str:
        """Prints the token on stdout unless it went to a file; says where it is."""
        if self.path is None:
            print(token)
            return "the token above is shown only now"
        return f"the token is in {self.path} (mode 0600)"


def _with_new_token(args: argparse.Namespace, change: Callable[[str], str]) -> str:
    """Makes a token, writes it to ``--token-out`` if given, then ``change``s the
    auth file with it; returns where the token is, for the closing line."""
    out = TokenOut(args.token_out, args.force)
    token = new_token()
    out.prepare(token)
    try:
        change(token)
        out.commit()
    finally:
        out.discard()
    return out.show(token)


def _add_token(args: argparse.Namespace) -> str:
    role = _role(args.role)
    assert role is not None
    where = _with_new_token(
        args,
        lambda token: add_token(args.auth_file, args.name, role, token, args.namespace),
    )
    return (
        f"added principal {args.name!r} (role {role}, namespaces "
        f"{_bound(args.namespace)}) to {args.auth_file}; {where}"
    )


def _bound(namespaces: list[str] | tuple[str, ...] | None) -> str:
    return ", ".join(namespaces or DEFAULT_NAMESPACES)


def _rotate(args: argparse.Namespace) -> str:
    where = _with_new_token(args, lambda token: rotate_token(args.auth_file, args.name, token))
    return (
        f"replaced the token of {args.name!r} in {args.auth_file}; the old one is refused "
        f"once the server reloads; {where}"
    )


def _add_cert(args: argparse.Namespace) -> str:
    principal = add_certificates(
        args.auth_file, args.name, _role(args.role), args.identity, args.namespace
    )
    identities = ", ".join(repr(i) for i in args.identity)
    return (
        f"mapped certificate {identities} to principal {principal.name!r} "
        f"(role {principal.role}, namespaces {_bound(principal.namespaces)}) in {args.auth_file}"
    )


def _remove(args: argparse.Namespace) -> str:
    removed = remove_principal(args.auth_file, args.name)
    return f"removed principal {removed.name!r} (role {removed.role}) from {args.auth_file}"


def _list(args: argparse.Namespace) -> str | None:
    principals = read_auth_file(args.auth_file)
    if args.json:
        for p in principals:
            fields = {"name": p.name, "role": p.role, "kind": kind(p)}
            print(
                json.dumps(
                    {
                        **fields,
                        "namespaces": list(p.namespaces),
                        "certificates": list(p.certificates),
                    }
                )
            )
        return None
    rows = [
        (p.name, p.role, kind(p), _bound(p.namespaces), ", ".join(p.certificates) or "-")
        for p in principals
    ]
    headers = ("NAME", "ROLE", "KIND", "NAMESPACES", "CERTIFICATES")
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    for row in (headers, *rows):
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return None


def _reload(args: argparse.Namespace) -> None:
    """SIGHUP to the server holding the pid file: the one named, else the
    default of the server's ``--listen``."""
    import signal

    from runstore.contract import pid_file

    path = Path(args.pid_file) if args.pid_file else pid_file.default_path(args.listen)
    try:
        pid = pid_file.running_pid(path)
        os.kill(pid, signal.SIGHUP)
    except pid_file.PidFileError as exc:
        raise AuthUsageError(str(exc)) from None
    except ProcessLookupError:
        raise AuthUsageError(f"{path} names pid {pid}, which is not running") from None
    except PermissionError:
        raise AuthUsageError(
            f"not allowed to signal pid {pid} (from {path}): run as the server's user"
        ) from None
    print(
        f"sent SIGHUP to runstore serve (pid {pid}, from {path}): it re-reads the auth file "
        "and the TLS files",
        file=sys.stderr,
    )


def _file_argument(parser: argparse.ArgumentParser, *, created: bool = False) -> None:
    parser.add_argument(
        "--auth-file",
        type=Path,
        required="RUNSTORE_AUTH_FILE" not in os.environ,
        default=os.environ.get("RUNSTORE_AUTH_FILE"),
        metavar="PATH",
        help="the TOML file (env RUNSTORE_AUTH_FILE)" + ("; created if missing" if created else ""),
    )


def _token_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-out",
        metavar="FILE",
        help="write the token to FILE (created with mode 0600) instead of stdout",
    )
    parser.add_argument("--force", action="store_true", help="let --token-out overwrite FILE")


def _namespaces_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help='a namespace the principal may act in (repeatable; "*" for every one; '
        "default: default)",
    )


def add_arguments(auth: argparse.ArgumentParser) -> None:
    actions = auth.add_subparsers(dest="auth_command", required=True, metavar="ACTION")

    def action(name: str, handler: Callable[[argparse.Namespace], str | None], help: str) -> Any:
        parser = actions.add_parser(name, help=help, description=help)
        parser.set_defaults(handler=handler)
        return parser

    listing = action("list", _list, "the principals: name, role and kind (never tokens or hashes)")
    _file_argument(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")

    add = action("add-token", _add_token, "add a principal with a new bearer token (shown once)")
    _file_argument(add, created=True)
    add.add_argument("--name", required=True, help="the principal's unique name")
    add.add_argument("--role", required=True, metavar="ROLE", help=", ".join(sorted(ROLES)))
    _namespaces_argument(add)
    _token_out(add)

    rotate = action("rotate", _rotate, "replace a principal's token with a new one (shown once)")
    _file_argument(rotate)
    rotate.add_argument("--name", required=True, help="the principal")
    _token_out(rotate)

    cert = action(
        "add-cert",
        _add_cert,
        "map a client-certificate identity (SAN URI, SAN DNS name or subject CN) to a principal",
    )
    _file_argument(cert, created=True)
    cert.add_argument(
        "--name", required=True, help="a new principal, or one to add the identity to"
    )
    cert.add_argument(
        "--role", metavar="ROLE", help=f"for a new principal: {', '.join(sorted(ROLES))}"
    )
    cert.add_argument(
        "--identity",
        action="append",
        required=True,
        metavar="ID",
        help="e.g. spiffe://example.org/worker/eu-1, worker-eu-1.internal, or a CN (repeatable)",
    )
    _namespaces_argument(cert)

    remove = action("remove", _remove, "delete a principal (its calls are refused after SIGHUP)")
    _file_argument(remove)
    remove.add_argument("--name", required=True, help="the principal")

    reload = action(
        "reload",
        _reload,
        "make the running server on this machine re-read its auth file and TLS files (SIGHUP "
        "to the process in its pid file; under --workers the parent passes it to every worker)",
    )
    reload.add_argument(
        "--pid-file",
        default=os.environ.get("RUNSTORE_PID_FILE"),
        metavar="PATH",
        help="the server's --pid-file (env RUNSTORE_PID_FILE); default: the one of --listen",
    )
    reload.add_argument(
        "--listen",
        default=os.environ.get("RUNSTORE_LISTEN", DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help="the server's --listen, whose port names its default pid file "
        f"(env RUNSTORE_LISTEN, default {DEFAULT_LISTEN})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        said = args.handler(args)
    except (AuthUsageError, AuthFileError) as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"runstore: {exc.filename or args.auth_file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if said is not None:
        print(f"{said} ({RELOAD_HINT})", file=sys.stderr)
    return 0


COMMAND: Final = Command(
    help="manage the principals of an --auth-file (list, add-token, add-cert, rotate, remove) "
    "and reload it in a running server (reload)",
    add_arguments=add_arguments,
    run=run,
)
