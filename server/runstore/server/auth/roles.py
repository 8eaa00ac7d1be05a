"""Who may call what: one table from every gRPC method to the roles allowed.

The interceptor consults only this table. A runstore method's roles are
declared on the method (``method_rules``, from ``runstore.v1.method_rules``);
a method without an entry is denied to every principal (deny by default).
Health is open to anyone (load balancers carry no credentials); reflection,
not a runstore service, needs any valid principal. The roles themselves are
``runstore.contract.auth_file.ROLES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from runstore.contract.auth_file import ADMIN, HOST, READER, ROLES, WORKER
from runstore.server.method_rules import DECLARED

__all__ = ["ADMIN", "AUDITED_METHODS", "HOST", "METHOD_ROLES", "OPEN_METHODS", "READER", "WORKER"]

OPEN_METHODS: Final = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
"""Methods anyone may call, with or without credentials."""

METHOD_ROLES: Final[Mapping[str, frozenset[str]]] = {
    **{method: declared.roles for method, declared in DECLARED.items()},
    # Reflection: any valid principal (it names every method, so not anonymous).
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": ROLES,
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": ROLES,
}

AUDITED_METHODS: Final = frozenset(
    method for method, declared in DECLARED.items() if declared.audited
)
"""Methods logged with the calling principal's name, whatever the outcome."""


def allowed(method: str, role: str) -> bool:
    """Whether ``role`` may call ``method`` (False for a method not in the table)."""
    return role in METHOD_ROLES.get(method, frozenset())
