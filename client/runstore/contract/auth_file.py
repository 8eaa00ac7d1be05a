"""The ``--auth-file`` (TOML): who may call a runstore server, with which role.

    [[principal]]
    name = "chat-host"
    role = "host"
    token_sha256 = "3f7a..."            # SHA-256 of the bearer token, hex

    [[principal]]
    name = "worker-eu-1"
    role = "worker"
    certificates = ["spiffe://example.org/worker/eu-1"]   # SAN URI, SAN DNS or CN

The file holds hashes only, never a token. The server reads it
(``runstore.server.auth``); ``runstore auth`` writes it, so its rules live here,
in the distribution both install. Writing needs ``tomli-w`` (runstore-client's
``cli`` extra); reading needs nothing beyond the standard library.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

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
_KEYS: Final = frozenset({"name", "role", "token_sha256", "certificates"})


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
    return Principal(
        name=name,
        role=str(role),
        token_digest=bytes.fromhex(token_hash),
        certificates=tuple(certificates),
    )


def read_auth_file(path: Path) -> tuple[Principal, ...]:
    """The principals of the file at ``path``; raises ``AuthFileError`` naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthFileError(f"{path}: cannot read: {exc}") from None
    return parse_auth_file(text, str(path))


def add_token(path: Path, name: str, role: str) -> str:
    """Adds a principal with a new random token to ``path`` (created if missing,
    mode 0600) and returns the token; only its hash is written."""
    import tomli_w  # the cli extra: only writing the file needs it

    if role not in ROLES:
        raise AuthFileError(f"role must be one of {sorted(ROLES)}, not {role!r}")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    existing = parse_auth_file(text, str(path))
    if any(principal.name == name for principal in existing):
        raise AuthFileError(f"{path}: a principal named {name!r} already exists")
    token = secrets.token_urlsafe(32)
    entry: Mapping[str, Any] = {"name": name, "role": role, "token_sha256": hash_token(token)}
    addition = tomli_w.dumps({"principal": [entry]})
    updated = (
        text
        + ("\n" if text and not text.endswith("\n") else "")
        + ("\n" if text else "")
        + addition
    )
    parse_auth_file(updated, str(path))
    _write_private(path, updated)
    return token


def _write_private(path: Path, text: str) -> None:
    """Replaces ``path`` atomically with a file only its owner can read."""
    directory = path.parent if str(path.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
