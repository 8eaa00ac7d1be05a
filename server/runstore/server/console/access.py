"""Who may see the console: the gRPC API's principals and roles, by bearer token or sign-in.

A request proves a principal with ``Authorization: Bearer TOKEN`` (scripts) or
with the sign-in cookie that ``/login`` sets (people). The cookie holds only a
random ID into an in-memory table of sign-ins; the table keeps the token's
SHA-256, never the token, and every request looks the principal up again in
the auth file's current principals, so removing a principal (SIGHUP) signs it
out at once. The console reads through the same methods a gRPC caller would
(``CONSOLE_METHODS``, those declared ``console_reads``): a principal may open
it only if its role may call every one of them (``roles.METHOD_ROLES``: admin,
host and reader; not worker). With authentication off (loopback development)
the console is open, as the gRPC API is. Which namespaces a principal may view
is ``Principal.bound_to``, as for a gRPC call.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from runstore.contract.namespaces import DEFAULT, EVERY
from runstore.server.auth import roles
from runstore.server.auth.principals import ANONYMOUS, Principal, PrincipalsFile
from runstore.server.method_rules import DECLARED

COOKIE: Final = "runstore_console"
"""The sign-in cookie's name: a random ID, HttpOnly, SameSite=Strict (Secure under TLS)."""

SIGN_IN_SECONDS: Final = 12 * 3600
"""A sign-in lasts this long; then the person signs in again."""

MAX_SIGN_INS: Final = 10_000
"""Sign-ins kept at once; the oldest is dropped first (memory stays bounded)."""

CONSOLE_METHODS: Final = frozenset(
    method for method, declared in DECLARED.items() if declared.console_reads
)
"""The read methods behind the console's screens (declared ``console_reads``)."""


def may_view(principal: Principal) -> bool:
    """Whether ``principal``'s role may make every one of the console's reads."""
    return all(roles.allowed(method, principal.role) for method in CONSOLE_METHODS)


def home_namespace(principal: Principal, active: frozenset[str]) -> str:
    """The namespace a screen shows when its URL names none: ``default`` when
    the principal may view it, else the first active namespace it is bound to
    (its only one, as for a gRPC call without the header), else its first."""
    viewable = viewable_namespaces(principal, active)
    if viewable:
        return viewable[0]
    first = principal.namespaces[0] if principal.namespaces else DEFAULT
    return DEFAULT if first == EVERY else first


def viewable_namespaces(
    principal: Principal, active: frozenset[str], *, open_console: bool = False
) -> list[str]:
    """The namespaces the picker offers ``principal``: the active ones it is
    bound to (every active one for ``*``, or on a console with authentication
    off), ``default`` first."""
    names = {name for name in active if open_console or principal.bound_to(name)}
    return sorted(names, key=lambda name: (name != DEFAULT, name))


@dataclass(frozen=True, slots=True)
class SignIn:
    token_digest: bytes
    expires_at: float


class Access:
    """Decides the principal of a console request.

    Args:
        principals: The server's reloadable auth file; None when authentication is off.
        clock: Monotonic seconds, for sign-in expiry.
    """

    def __init__(
        self,
        principals: PrincipalsFile | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._principals = principals
        self._clock = clock
        self._sign_ins: OrderedDict[str, SignIn] = OrderedDict()

    @property
    def required(self) -> bool:
        """Whether a request must prove a principal (authentication is on)."""
        return self._principals is not None

    def by_token(self, token: str) -> Principal | None:
        """The principal whose bearer token is ``token``, if any."""
        if self._principals is None:
            return ANONYMOUS
        return self._principals.current.by_token(token)

    def by_sign_in(self, sign_in_id: str) -> Principal | None:
        """The principal signed in under cookie value ``sign_in_id``, if still valid."""
        if self._principals is None:
            return ANONYMOUS
        sign_in = self._sign_ins.get(sign_in_id)
        if sign_in is None:
            return None
        if sign_in.expires_at <= self._clock():
            del self._sign_ins[sign_in_id]
            return None
        found = None
        for principal in self._principals.current:
            if principal.token_digest and hmac.compare_digest(
                principal.token_digest, sign_in.token_digest
            ):
                found = principal
        return found

    def sign_in(self, token: str) -> tuple[str, Principal] | None:
        """A new sign-in for ``token`` (its cookie value and principal), or None
        when the token names no principal."""
        principal = self.by_token(token)
        if principal is None:
            return None
        sign_in_id = secrets.token_urlsafe(32)
        self._sign_ins[sign_in_id] = SignIn(principal.token_digest, self._clock() + SIGN_IN_SECONDS)
        while len(self._sign_ins) > MAX_SIGN_INS:
            self._sign_ins.popitem(last=False)
        return sign_in_id, principal

    def sign_out(self, sign_in_id: str) -> None:
        self._sign_ins.pop(sign_in_id, None)
