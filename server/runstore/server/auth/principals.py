"""Principals: who may call runstore, as the ``--auth-file`` names them.

The file's format and rules are ``runstore.contract.auth_file`` (shared with
``runstore auth``, which writes it); here the server looks callers up in it and
re-reads it on demand (SIGHUP): a file that does not parse keeps the last good
principals.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from runstore.contract.auth_file import (
    AuthFileError,
    Principal,
    hash_token,
    parse_auth_file,
    read_auth_file,
)

__all__ = [
    "ANONYMOUS",
    "AuthFileError",
    "Principal",
    "Principals",
    "PrincipalsFile",
    "hash_token",
    "load_principals",
    "parse_principals",
]

log = logging.getLogger(__name__)


ANONYMOUS: Final = Principal(name="anonymous", role="")
"""The caller when authentication is off (only for logs; it holds no role)."""


class Principals:
    """An immutable set of principals, looked up by token or certificate identity."""

    def __init__(self, principals: Sequence[Principal]) -> None:
        self._all = tuple(principals)
        self._with_token = tuple(p for p in self._all if p.token_digest)
        self._by_identity = {ident: p for p in self._all for ident in p.certificates}

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Any:
        return iter(self._all)

    def by_token(self, token: str) -> Principal | None:
        """The principal whose token hash matches, compared in constant time.

        Every stored hash is compared (no early exit), so the time taken says
        nothing about which principal, if any, nearly matched.
        """
        digest = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for principal in self._with_token:
            if hmac.compare_digest(digest, principal.token_digest):
                found = principal
        return found

    def by_certificate(self, identities: Iterable[str]) -> Principal | None:
        """The principal mapped to the first of ``identities`` that has one."""
        for identity in identities:
            principal = self._by_identity.get(identity)
            if principal is not None:
                return principal
        return None


def parse_principals(text: str, source: str = "auth file") -> Principals:
    """The principals in TOML ``text``; raises ``AuthFileError`` naming the problem."""
    return Principals(parse_auth_file(text, source))


def load_principals(path: Path) -> Principals:
    return Principals(read_auth_file(path))


class ReloadListener(Protocol):
    """Told each set of principals a reload installs."""

    def __call__(self, principals: Principals, /) -> None: ...


class PrincipalsFile:
    """The principals of one auth file, re-read on ``reload()``.

    ``current`` is swapped atomically: a unary call in flight keeps the set it
    started with, the next call sees the new one. Open streams cannot wait for
    a next call, so they listen (``listen``) and are told each new set.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.current = load_principals(path)
        self._lock = threading.Lock()
        self._listeners: set[ReloadListener] = set()

    def listen(self, listener: ReloadListener) -> None:
        """Calls ``listener`` with every set a reload installs (in the thread
        that reloads), until ``unlisten``."""
        self._listeners.add(listener)

    def unlisten(self, listener: ReloadListener) -> None:
        self._listeners.discard(listener)

    def reload(self) -> bool:
        """Re-reads the file; on any error keeps the last good principals and logs why."""
        with self._lock:
            try:
                fresh = load_principals(self.path)
            except AuthFileError as exc:
                log.error(
                    "auth file not reloaded, keeping %d principals: %s", len(self.current), exc
                )
                return False
            self.current = fresh
        log.info("auth file %s reloaded: %d principals", self.path, len(fresh))
        for listener in list(self._listeners):
            listener(fresh)
        return True
