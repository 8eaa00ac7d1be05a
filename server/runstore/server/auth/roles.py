"""Who may call what: one table from every gRPC method to the roles allowed.

The interceptor consults only this table. A method without an entry is denied
to every principal (deny by default), so a new RPC stays closed until someone
decides who may call it; a test checks every method of every served service has
an entry. Health is open to anyone (load balancers carry no credentials);
reflection needs any valid principal. The roles themselves are
``runstore.contract.auth_file.ROLES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from runstore.contract.auth_file import ADMIN, HOST, READER, ROLES, WORKER

_EVERYONE: Final = ROLES
_HOST_WORKER: Final = frozenset({ADMIN, HOST, WORKER})
_WORKER: Final = frozenset({ADMIN, WORKER})
_HOST: Final = frozenset({ADMIN, HOST})
_HOST_READER: Final = frozenset({ADMIN, HOST, READER})

_RUNTIME: Final = "/runstore.v1.RuntimeStore/"
_SESSIONS: Final = "/runstore.v1.SessionAdmin/"
_MEMORY: Final = "/runstore.v1.MemoryStore/"
_CONTEXT: Final = "/runstore.v1.ContextStore/"
_NAMESPACES: Final = "/runstore.v1.NamespaceAdmin/"
_ADMIN: Final = frozenset({ADMIN})

OPEN_METHODS: Final = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})
"""Methods anyone may call, with or without credentials."""

METHOD_ROLES: Final[Mapping[str, frozenset[str]]] = {
    # RuntimeStore: the workers' service; its reads are open to every role.
    _RUNTIME + "LoadSessionStatus": _EVERYONE,
    _RUNTIME + "StartRootRun": _WORKER,
    _RUNTIME + "StartChildRun": _WORKER,
    _RUNTIME + "StartOneShotRun": _WORKER,
    _RUNTIME + "StartOneShotChildRun": _WORKER,
    _RUNTIME + "StartSynchronousRun": _WORKER,
    _RUNTIME + "AppendRunRecord": _WORKER,
    _RUNTIME + "AppendRunRecords": _WORKER,
    _RUNTIME + "RecordRunCancellation": _WORKER,
    _RUNTIME + "RecordRunSuspension": _WORKER,
    _RUNTIME + "RecordRunTerminal": _WORKER,
    _RUNTIME + "RepairRunSuspension": _WORKER,
    _RUNTIME + "RepairRunTerminal": _WORKER,
    _RUNTIME + "LoadRun": _EVERYONE,
    _RUNTIME + "LoadRunSuspension": _EVERYONE,
    _RUNTIME + "ListRunRecords": _EVERYONE,
    _RUNTIME + "ListSessionRunRecords": _EVERYONE,
    _RUNTIME + "ListRunTranscriptRecords": _EVERYONE,
    # Seeds and preparations: uploads and their settlement are the workers';
    # reads of published seeds are open like every read. FindRunPreparation is
    # a worker's recovery step, not a read of stored runs.
    _RUNTIME + "BeginRunSeed": _WORKER,
    _RUNTIME + "AppendRunSeed": _WORKER,
    _RUNTIME + "PublishRunSeed": _WORKER,
    _RUNTIME + "FindRunPreparation": _WORKER,
    _RUNTIME + "SettleRunPreparation": _WORKER,
    _RUNTIME + "ListRunPreparationRecords": _EVERYONE,
    _RUNTIME + "LoadRunSeed": _EVERYONE,
    _RUNTIME + "ListRunSeedRecords": _EVERYONE,
    _RUNTIME + "WatchSessionRunRecords": _EVERYONE,
    _RUNTIME + "WatchRunRecords": _EVERYONE,
    # SessionAdmin: the host's service; workers may not even read it.
    _SESSIONS + "CreateSession": _HOST,
    _SESSIONS + "LoadSession": _HOST_READER,
    _SESSIONS + "EndSession": _HOST,
    _SESSIONS + "PurgeSession": _HOST,
    _SESSIONS + "ListRunsBySession": _HOST_READER,
    _SESSIONS + "ListSessions": _HOST_READER,
    _SESSIONS + "ListRuns": _HOST_READER,
    _SESSIONS + "PurgeEndedSessions": _HOST,
    _SESSIONS + "PurgeSessionlessRuns": _HOST,
    # MemoryStore and ContextStore: conversation state kept by host and workers.
    _MEMORY + "LoadRun": _EVERYONE,
    _MEMORY + "AppendEvents": _HOST_WORKER,
    _MEMORY + "DeleteRun": _HOST_WORKER,
    _CONTEXT + "GetContext": _EVERYONE,
    _CONTEXT + "SaveContext": _HOST_WORKER,
    _CONTEXT + "DeleteContext": _HOST_WORKER,
    _CONTEXT + "AppendTranscript": _HOST_WORKER,
    _CONTEXT + "ListTranscript": _EVERYONE,
    # NamespaceAdmin: admins only, and only those bound to every namespace ("*",
    # checked by interceptors.namespaces; docs/namespaces.md).
    _NAMESPACES + "CreateNamespace": _ADMIN,
    _NAMESPACES + "GetNamespace": _ADMIN,
    _NAMESPACES + "ListNamespaces": _ADMIN,
    _NAMESPACES + "UpdateNamespace": _ADMIN,
    _NAMESPACES + "DeleteNamespace": _ADMIN,
    # Reflection: any valid principal (it names every method, so not anonymous).
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": _EVERYONE,
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": _EVERYONE,
}

AUDITED_METHODS: Final = frozenset(
    {
        _SESSIONS + "EndSession",
        _SESSIONS + "PurgeSession",
        _SESSIONS + "PurgeEndedSessions",
        _SESSIONS + "PurgeSessionlessRuns",
        _NAMESPACES + "CreateNamespace",
        _NAMESPACES + "UpdateNamespace",
        _NAMESPACES + "DeleteNamespace",
    }
)
"""Methods logged with the calling principal's name, whatever the outcome."""


def allowed(method: str, role: str) -> bool:
    """Whether ``role`` may call ``method`` (False for a method not in the table)."""
    return role in METHOD_ROLES.get(method, frozenset())
