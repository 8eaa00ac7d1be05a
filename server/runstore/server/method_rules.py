"""Each RPC method's properties, read from its ``runstore.v1.method_rules``
option: the one home of what a method is (docs/development.md, "Adding a method").

Who may call a method, which quota it counts against, whether it adds stored
data, whether a standby may serve its reads, where it acts, whether it is
audited and whether the console reads through it are declared once, on the
method in ``protos/runstore/v1`` (``options.proto``). This module reads every
method of every ``runstore.v1`` service at import time into ``DECLARED``;
the roles, quota, read-lag, namespace and console tables are derived from it.
A method without the option, or with a value left unspecified, stops the
import (``DeclarationError``): a new method stays closed until declared.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

import runstore.v1
from runstore.v1 import options_pb2

NEVER: Final = "never"
WHEN_TOLERATED: Final = "when_tolerated"
ALWAYS: Final = "always"
"""``Declared.standby_reads``: never, when the call carries
``x-runstore-read-lag: tolerated``, or always (docs/failover.md)."""

IN_ONE: Final = "one"
ON_ALL: Final = "all"
"""``Declared.namespace_scope``: in one namespace, or on the namespaces
themselves (a principal bound to ``"*"``; docs/namespaces.md)."""

READS: Final = "reads"
WRITES: Final = "writes"
WATCH_STREAMS: Final = "watch_streams"
"""``Declared.quota``: the quota class a call counts against (None: none)."""

_ROLES: Final = {
    options_pb2.ROLE_ADMIN: "admin",
    options_pb2.ROLE_HOST: "host",
    options_pb2.ROLE_WORKER: "worker",
    options_pb2.ROLE_READER: "reader",
}
_QUOTAS: Final[Mapping[int, str | None]] = {
    options_pb2.QUOTA_CLASS_NONE: None,
    options_pb2.QUOTA_CLASS_READS: READS,
    options_pb2.QUOTA_CLASS_WRITES: WRITES,
    options_pb2.QUOTA_CLASS_WATCH_STREAMS: WATCH_STREAMS,
}
_STANDBY: Final = {
    options_pb2.STANDBY_READS_NEVER: NEVER,
    options_pb2.STANDBY_READS_WHEN_TOLERATED: WHEN_TOLERATED,
    options_pb2.STANDBY_READS_ALWAYS: ALWAYS,
}
_SCOPES: Final = {
    options_pb2.NAMESPACE_SCOPE_ONE: IN_ONE,
    options_pb2.NAMESPACE_SCOPE_ALL: ON_ALL,
}


class DeclarationError(Exception):
    """A method of a runstore service is not (fully, or consistently) declared."""


@dataclass(frozen=True, slots=True)
class Declared:
    """One method's declared properties (``runstore.v1.MethodRules``), as plain values."""

    method: str
    """The gRPC path, ``/runstore.v1.Service/Method``."""
    roles: frozenset[str]
    quota: str | None
    adds_data: bool
    standby_reads: str
    namespace_scope: str
    audited: bool
    console_reads: bool
    response_streaming: bool


def _declared(method: MethodDescriptor) -> Declared:
    path = f"/{method.containing_service.full_name}/{method.name}"
    options = method.GetOptions()
    if not options.HasExtension(options_pb2.method_rules):
        raise DeclarationError(f"{path} has no (runstore.v1.method_rules) option")
    rules = options.Extensions[options_pb2.method_rules]

    def refuse(field: str, why: str) -> DeclarationError:
        return DeclarationError(f"{path}: method_rules.{field} {why}")

    if not rules.roles or any(role not in _ROLES for role in rules.roles):
        raise refuse("roles", "must list at least one role, none of them unspecified")
    if rules.quota not in _QUOTAS:
        raise refuse("quota", "must be specified (QUOTA_CLASS_NONE for none)")
    if rules.standby_reads not in _STANDBY:
        raise refuse("standby_reads", "must be specified")
    if rules.namespace_scope not in _SCOPES:
        raise refuse("namespace_scope", "must be specified")
    quota = _QUOTAS[rules.quota]
    if rules.adds_data and quota != WRITES:
        raise refuse("adds_data", "needs quota QUOTA_CLASS_WRITES")
    if (quota == WATCH_STREAMS) != method.server_streaming:
        raise refuse("quota", "is QUOTA_CLASS_WATCH_STREAMS exactly for a streamed response")
    if _SCOPES[rules.namespace_scope] == ON_ALL and quota is not None:
        raise refuse("quota", "must be QUOTA_CLASS_NONE on a method acting on every namespace")
    return Declared(
        method=path,
        roles=frozenset(_ROLES[role] for role in rules.roles),
        quota=quota,
        adds_data=rules.adds_data,
        standby_reads=_STANDBY[rules.standby_reads],
        namespace_scope=_SCOPES[rules.namespace_scope],
        audited=rules.audited,
        console_reads=rules.console_reads,
        response_streaming=method.server_streaming,
    )


def declared(services: Iterable[ServiceDescriptor]) -> dict[str, Declared]:
    """Every method of ``services`` by gRPC path; raises ``DeclarationError``
    for the first one not fully declared."""
    return {
        found.method: found
        for service in services
        for method in service.methods
        for found in (_declared(method),)
    }


def runstore_services() -> list[ServiceDescriptor]:
    """Every service of the generated ``runstore.v1`` package, by name."""
    services: dict[str, ServiceDescriptor] = {}
    for module in pkgutil.iter_modules(runstore.v1.__path__):
        if module.name.endswith("_pb2"):
            loaded = importlib.import_module(f"runstore.v1.{module.name}")
            services.update(loaded.DESCRIPTOR.services_by_name)
    return [services[name] for name in sorted(services)]


DECLARED: Final[Mapping[str, Declared]] = declared(runstore_services())
"""Every method of every runstore service, by gRPC path."""
