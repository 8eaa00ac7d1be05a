"""``runstore.v1.NamespaceAdmin``: namespaces' creation, reading, listing,
changes and deletion (docs/namespaces.md)."""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import grpc

from runstore.contract.errors import ValidationError
from runstore.contract.wire import NAMESPACE_SETTINGS, NAMESPACE_STATE_TO_WIRE
from runstore.server.convert import timestamp_to_wire
from runstore.server.core.namespace_model import ACTIVE, Namespace
from runstore.server.core.namespaces import NamespaceStore
from runstore.server.error_status import maps_errors
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import namespace_admin_pb2_grpc as na_grpc

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


FIELD_OF: Final = {
    "name": "namespace.name",
    "description": "namespace.description",
    **{
        attribute: f"namespace.{group}.{field}"
        for attribute, (group, field) in NAMESPACE_SETTINGS.items()
    },
}
"""The request field of each ``Namespace`` attribute (ErrorInfo ``field``)."""

MASK_PATHS: Final = {
    "description": ("description",),
    "retention": ("retain_ended_sessions_s", "retain_sessionless_runs_s"),
    "quotas": (
        "quota_writes_per_s",
        "quota_reads_per_s",
        "quota_watch_streams",
        "quota_stored_bytes",
    ),
    **{
        f"{group}.{field}": (attribute,) for attribute, (group, field) in NAMESPACE_SETTINGS.items()
    },
}
"""The update_mask paths UpdateNamespace takes, and the attributes each changes."""


def namespace_to_wire(namespace: Namespace) -> na.Namespace:
    message = na.Namespace(
        name=namespace.name,
        state=NAMESPACE_STATE_TO_WIRE[namespace.state],
        description=namespace.description,
        create_time=timestamp_to_wire(namespace.created_at),
        update_time=timestamp_to_wire(namespace.updated_at),
    )
    for attribute, (group, field) in NAMESPACE_SETTINGS.items():
        value = getattr(namespace, attribute)
        if value is not None:
            setattr(getattr(message, group), field, value)
    return message


def _settings_from_wire(message: na.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"description": message.description}
    for attribute, (group, field) in NAMESPACE_SETTINGS.items():
        part = getattr(message, group)
        settings[attribute] = getattr(part, field) if part.HasField(field) else None
    return settings


def _changes(request: na.UpdateNamespaceRequest) -> dict[str, Any]:
    if not request.HasField("update_mask") or not request.update_mask.paths:
        raise ValidationError("update_mask must name the fields to change", field="update_mask")
    settings = _settings_from_wire(request.namespace)
    changes: dict[str, Any] = {}
    for path in request.update_mask.paths:
        attributes = MASK_PATHS.get(path)
        if attributes is None:
            raise ValidationError(
                f"update_mask path {path!r} is not one of {', '.join(sorted(MASK_PATHS))}",
                field="update_mask",
            )
        for attribute in attributes:
            changes[attribute] = settings[attribute]
    return changes


class NamespaceAdminServicer(na_grpc.NamespaceAdminServicer):
    def __init__(self, namespaces: NamespaceStore) -> None:
        self._namespaces = namespaces

    @maps_errors
    async def CreateNamespace(
        self, request: na.CreateNamespaceRequest, context: Context
    ) -> na.CreateNamespaceResponse:
        draft = Namespace(
            name=request.namespace.name,
            state=ACTIVE,
            created_at=0,
            updated_at=0,
            **_settings_from_wire(request.namespace),
        )
        created = await self._namespaces.create(draft, FIELD_OF)
        return na.CreateNamespaceResponse(namespace=namespace_to_wire(created))

    @maps_errors
    async def GetNamespace(
        self, request: na.GetNamespaceRequest, context: Context
    ) -> na.GetNamespaceResponse:
        found = await self._namespaces.get(request.name)
        return na.GetNamespaceResponse(namespace=namespace_to_wire(found))

    @maps_errors
    async def ListNamespaces(
        self, request: na.ListNamespacesRequest, context: Context
    ) -> na.ListNamespacesResponse:
        page, token = await self._namespaces.list(request.page_size, request.page_token)
        return na.ListNamespacesResponse(
            namespaces=[namespace_to_wire(namespace) for namespace in page],
            next_page_token=token,
        )

    @maps_errors
    async def UpdateNamespace(
        self, request: na.UpdateNamespaceRequest, context: Context
    ) -> na.UpdateNamespaceResponse:
        changes = _changes(request)
        changed = await self._namespaces.update(request.namespace.name, changes, FIELD_OF)
        return na.UpdateNamespaceResponse(namespace=namespace_to_wire(changed))

    @maps_errors
    async def DeleteNamespace(
        self, request: na.DeleteNamespaceRequest, context: Context
    ) -> na.DeleteNamespaceResponse:
        deleting = await self._namespaces.delete(request.name)
        return na.DeleteNamespaceResponse(namespace=namespace_to_wire(deleting))
