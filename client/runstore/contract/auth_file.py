"""The ``--auth-file`` (TOML): who may call a runstore server, with which role.

    [[principal]]
    name = "chat-host"
    role = "host"
    token_sha256 = "3f7a..."            # SHA-256 of the bearer token, hex

    [[principal]]
    name = "worker-eu-1"
    role = "worker"
    certificates = ["spiffe://example.org/worker/eu-1"]   # SAN URI, SAN DNS or CN
    namespaces = ["team-a", "team-b"]   # default ["default"]; ["*"] every namespace

The file holds hashes only, never a token. The server reads it
(``runstore.server.auth``); ``runstore auth`` writes it (``add_token``,
``add_certificates``, ``rotate_token``, ``remove_principal``: each checks the
whole result and replaces the file atomically), so its rules live here,
in the distribution both install. Writing needs ``tomli-w`` (runstore-client's
``cli`` extra); reading needs nothing beyond the standard library.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from runstore.contract.namespaces import DEFAULT, EVERY, binding_problem

ADMIN: Final = "admin"
"""Everything, including administration RPCs added later without a table entry of their own."""
HOST: Final = "host"
"""Session administration, conversation state (memory, context) and every read."""
WORKER: Final = "worker"
"""Runtime writes and reads, memory and context; never session administration."""
READER: Final = "reader"
"""Read-only methods only (Load*, List*, Get*, Watch*)."""

ROLES: Final = frozenset({ADMIN, HOST, WORKER, READER})
"""A principal holds exactly one of these; the server maps each to its methods."""

_HEX_SHA256: Final = re.compile(r"[0-9a-f]{64}")
_KEYS: Final = frozenset({"name", "role", "token_sha256", "certificates", "namespaces"})

DEFAULT_NAMESPACES: Final = (DEFAULT,)
"""The binding of a principal whose entry has no ``namespaces``."""


class AuthFileError(ValueError):
    """The auth file cannot be used; the message says where and why."""


def hash_token(token: str) -> str:
    """The hex SHA-256 the auth file stores for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """A named caller with exactly one role."""

    name: str
    role: str
    token_digest: bytes = b""
    """SHA-256 of the bearer token (raw bytes); empty for certificate-only principals."""
    certificates: tuple[str, ...] = ()
    """Client-certificate identities that prove this principal under mTLS."""
    namespaces: tuple[str, ...] = DEFAULT_NAMESPACES
    """The namespaces it may act in; ``("*",)`` for every one (docs/namespaces.md)."""

    def bound_to(self, namespace: str) -> bool:
        """Whether it may act in ``namespace``: listed in its binding, or bound
        to every namespace (``"*"``). ``bound_to(EVERY)`` asks for the latter.
        The one home of the rule: gRPC calls, open streams after a reload and
        the console all ask here (docs/namespaces.md)."""
        return EVERY in self.namespaces or namespace in self.namespaces


def parse_auth_file(text: str, source: str = "auth file") -> tuple[Principal, ...]:
    """The principals in TOML ``text``; raises ``AuthFileError`` naming the problem."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AuthFileError(f"{source}: not valid TOML: {exc}") from None
    extra = set(document) - {"principal"}
    if extra:
        raise AuthFileError(f"{source}: unknown top-level key(s) {sorted(extra)}")
    entries = document.get("principal", [])
    if not isinstance(entries, list):
        raise AuthFileError(f"{source}: 'principal' must be an array of tables ([[principal]])")
    principals: list[Principal] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    identities: set[str] = set()
    for index, entry in enumerate(entries, start=1):
        where = f"{source}: principal #{index}"
        principal = _principal(entry, where)
        if principal.name in names:
            raise AuthFileError(f"{where}: name {principal.name!r} is used twice")
        if principal.token_digest and principal.token_digest in digests:
            raise AuthFileError(f"{where}: token_sha256 is used by another principal")
        for identity in principal.certificates:
            if identity in identities:
                raise AuthFileError(f"{where}: certificate {identity!r} is mapped twice")
        names.add(principal.name)
        digests.add(principal.token_digest)
        identities.update(principal.certificates)
        principals.append(principal)
    return tuple(principals)


def _principal(entry: object, where: str) -> Principal:
    if not isinstance(entry, dict):
        raise AuthFileError(f"{where}: must be a table")
    if "token" in entry:
        raise AuthFileError(f"{where}: store token_sha256 (the token's hash), never the token")
    unknown = set(entry) - _KEYS
    if unknown:
        raise AuthFileError(f"{where}: unknown key(s) {sorted(unknown)}")
    name, role = entry.get("name"), entry.get("role")
    if not isinstance(name, str) or not name.strip():
        raise AuthFileError(f"{where}: 'name' must be a non-empty string")
    where = f"{where} ({name!r})"
    if role not in ROLES:
        raise AuthFileError(f"{where}: 'role' must be one of {sorted(ROLES)}, not {role!r}")
    token_hash = entry.get("token_sha256", "")
    if not isinstance(token_hash, str) or (
        token_hash and not _HEX_SHA256.fullmatch(token_hash.lower())
    ):
        raise AuthFileError(f"{where}: 'token_sha256' must be 64 hex digits")
    certificates = entry.get("certificates", [])
    if not isinstance(certificates, list) or not all(
        isinstance(c, str) and c for c in certificates
    ):
        raise AuthFileError(f"{where}: 'certificates' must be a list of non-empty strings")
    if not token_hash and not certificates:
        raise AuthFileError(f"{where}: needs 'token_sha256' or 'certificates'")
    namespaces = entry.get("namespaces", list(DEFAULT_NAMESPACES))
    problem = binding_problem(namespaces)
    if problem is not None:
        raise AuthFileError(f"{where}: 'namespaces' {problem}")
    return Principal(
        name=name,
        role=str(role),
        token_digest=bytes.fromhex(token_hash),
        certificates=tuple(certificates),
        namespaces=tuple(namespaces),
    )


def read_auth_file(path: Path) -> tuple[Principal, ...]:
    """The principals of the file at ``path``; raises ``AuthFileError`` naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthFileError(f"{path}: cannot read: {exc}") from None
    return parse_auth_file(text, str(path))


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def kind(principal: Principal) -> str:
    """How a principal proves itself: ``token``, ``cert`` or ``token+cert``."""
    ways = [
        way
        for way, has in (("token", principal.token_digest), ("cert", principal.certificates))
        if has
    ]
    return "+".join(ways)


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise AuthFileError(f"role must be one of {', '.join(sorted(ROLES))}, not {role!r}")


def _check_identity(identity: str) -> None:
    if not identity or identity != identity.strip() or any(c.isspace() for c in identity):
        raise AuthFileError(
            f"a certificate identity is a SAN URI, a SAN DNS name or a subject CN "
            f"without spaces, not {identity!r}"
        )


def _read_text(path: Path, *, must_exist: bool) -> str:
    if not path.exists():
        if must_exist:
            raise AuthFileError(f"{path}: no such auth file")
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthFileError(f"{path}: cannot read: {exc}") from None


def _appended(text: str, entry: Mapping[str, Any]) -> str:
    """``text`` with one more ``[[principal]]`` table at its end, comments kept."""
    import tomli_w  # the cli extra: only writing the file needs it

    addition = tomli_w.dumps({"principal": [entry]})
    return (
        text
        + ("\n" if text and not text.endswith("\n") else "")
        + ("\n" if text else "")
        + addition
    )


def _check_namespaces(namespaces: list[str] | None) -> None:
    if namespaces is not None and (problem := binding_problem(namespaces)) is not None:
        raise AuthFileError(f"--namespace: the list {problem}")


def _with_namespaces(entry: dict[str, Any], namespaces: list[str] | None) -> dict[str, Any]:
    """``entry`` with its ``namespaces`` key, written only when not the default."""
    if namespaces is not None and tuple(namespaces) != DEFAULT_NAMESPACES:
        entry["namespaces"] = list(namespaces)
    return entry


def add_token(
    path: Path,
    name: str,
    role: str,
    token: str | None = None,
    namespaces: list[str] | None = None,
) -> str:
    """Adds a principal with a new random token (or ``token``), bound to
    ``namespaces`` (default ``["default"]``), to ``path`` (created if missing,
    mode 0600) and returns the token; only its hash is written."""
    _check_role(role)
    _check_namespaces(namespaces)
    text = _read_text(path, must_exist=False)
    existing = parse_auth_file(text, str(path))
    if any(principal.name == name for principal in existing):
        raise AuthFileError(f"{path}: a principal named {name!r} already exists")
    token = new_token() if token is None else token
    entry = _with_namespaces(
        {"name": name, "role": role, "token_sha256": hash_token(token)}, namespaces
    )
    _replace(path, _appended(text, entry))
    return token


def add_certificates(
    path: Path,
    name: str,
    role: str | None,
    identities: list[str],
    namespaces: list[str] | None = None,
) -> Principal:
    """Maps client-certificate ``identities`` to the principal ``name``: a new
    one with ``role`` (required then) and ``namespaces`` (default
    ``["default"]``), or an existing one, whose role and namespaces must match
    when given. Returns the principal as written."""
    _check_namespaces(namespaces)
    if not identities:
        raise AuthFileError("give at least one certificate identity")
    for identity in identities:
        _check_identity(identity)
    if role is not None:
        _check_role(role)
    text = _read_text(path, must_exist=False)
    existing = {p.name: p for p in parse_auth_file(text, str(path))}
    mapped = {i: p.name for p in existing.values() for i in p.certificates}
    for identity in identities:
        if identity in mapped:
            raise AuthFileError(
                f"{path}: certificate {identity!r} is already mapped to {mapped[identity]!r}"
            )
    current = existing.get(name)
    if current is None:
        if role is None:
            raise AuthFileError(f"{path}: no principal named {name!r}; give --role to add one")
        entry = _with_namespaces(
            {"name": name, "role": role, "certificates": identities}, namespaces
        )
        updated = _appended(text, entry)
    else:
        if role is not None and role != current.role:
            raise AuthFileError(
                f"{path}: principal {name!r} has role {current.role}, not {role} "
                "(a principal has one role)"
            )
        if namespaces is not None and tuple(namespaces) != current.namespaces:
            raise AuthFileError(
                f"{path}: principal {name!r} is bound to {list(current.namespaces)}, "
                f"not {namespaces}; edit its namespaces by hand"
            )
        changed = _with_certificates(current, [*current.certificates, *identities])
        updated = _edited(path, text, name, changed)
    _replace(path, updated)
    return next(p for p in parse_auth_file(updated, str(path)) if p.name == name)


def rotate_token(path: Path, name: str, token: str | None = None) -> str:
    """Gives the principal ``name`` a new random token (or ``token``) in place of
    its old one, which stops working at the next reload; returns the new token."""
    text = _read_text(path, must_exist=True)
    current = _named(path, text, name)
    if not current.token_digest:
        raise AuthFileError(
            f"{path}: principal {name!r} proves itself by certificate only and has no token "
            "to rotate"
        )
    token = new_token() if token is None else token
    fields = _fields(current)
    fields["token_sha256"] = hash_token(token)
    _replace(path, _edited(path, text, name, fields))
    return token


def remove_principal(path: Path, name: str) -> Principal:
    """Deletes the principal ``name``; returns it as it was."""
    text = _read_text(path, must_exist=True)
    current = _named(path, text, name)
    _replace(path, _edited(path, text, name, None))
    return current


def _named(path: Path, text: str, name: str) -> Principal:
    for principal in parse_auth_file(text, str(path)):
        if principal.name == name:
            return principal
    raise AuthFileError(f"{path}: no principal named {name!r}")


def _fields(principal: Principal) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": principal.name, "role": principal.role}
    if principal.token_digest:
        fields["token_sha256"] = principal.token_digest.hex()
    if principal.certificates:
        fields["certificates"] = list(principal.certificates)
    return _with_namespaces(fields, list(principal.namespaces))


def _with_certificates(principal: Principal, identities: list[str]) -> dict[str, Any]:
    fields = _fields(principal)
    fields["certificates"] = identities
    return fields


_TABLE_HEADER: Final = re.compile(
    r"^[ \t]*\[\[[ \t]*principal[ \t]*\]\][ \t]*(#.*)?$", re.MULTILINE
)


def _edited(path: Path, text: str, name: str, fields: Mapping[str, Any] | None) -> str:
    """``text`` with the ``[[principal]]`` table of ``name`` replaced by
    ``fields`` (or removed when None). Only that table is rewritten: comments
    elsewhere stay. A file not made of ``[[principal]]`` tables is refused."""
    import tomli_w

    starts = [match.start() for match in _TABLE_HEADER.finditer(text)]
    tables = [text[begin:end] for begin, end in zip(starts, [*starts[1:], len(text)], strict=True)]
    for index, table in enumerate(tables):
        try:
            entries = tomllib.loads(table).get("principal", [])
        except tomllib.TOMLDecodeError:
            break  # a header inside a multi-line string: do not guess
        if not (isinstance(entries, list) and len(entries) == 1 and entries[0].get("name") == name):
            continue
        replacement = "" if fields is None else tomli_w.dumps({"principal": [dict(fields)]})
        if replacement and tables[index + 1 :]:
            replacement += "\n"
        return text[: starts[index]] + replacement + text[starts[index] + len(table) :]
    raise AuthFileError(
        f"{path}: principal {name!r} is not in a [[principal]] table of its own; edit it by hand"
    )


def _replace(path: Path, text: str) -> None:
    """Checks ``text`` and puts it in place of ``path`` atomically: a temporary
    file in the same directory, renamed over it. The file keeps its mode (and,
    where allowed, its owner); a new one is 0600."""
    parse_auth_file(text, str(path))
    try:
        before: os.stat_result | None = path.stat()
    except FileNotFoundError:
        before = None
    directory = path.parent if str(path.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600 if before is None else stat.S_IMODE(before.st_mode))
        if before is not None:
            with contextlib.suppress(PermissionError):
                os.chown(temporary, before.st_uid, before.st_gid)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
