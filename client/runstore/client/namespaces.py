"""``RemoteNamespaceAdmin``: ``runstore.v1.NamespaceAdmin`` over gRPC
(docs/namespaces.md). Only an admin principal bound to every namespace ("*")
may call it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final

from google.protobuf import field_mask_pb2

from runstore.client import convert
from runstore.client.calls import Client
from runstore.contract.model import ListPage
from runstore.contract.wire import NAMESPACE_SETTINGS, NAMESPACE_STATE_FROM_WIRE
from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import namespace_admin_pb2_grpc as na_grpc


@dataclass(frozen=True, slots=True)
class NamespaceSettings:
    """What a namespace may set; None is unset (the server's retention, no quota)."""

    description: str = ""
    retain_ended_sessions_s: float | None = None
    retain_sessionless_runs_s: float | None = None
    quota_writes_per_s: float | None = None
    quota_reads_per_s: float | None = None
    quota_watch_streams: int | None = None
    quota_stored_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """One namespace as the server reports it."""

    name: str
    state: str
    """``active``, or ``deleting`` while its data is purged."""
    created_at: datetime
    updated_at: datetime
    settings: NamespaceSettings


def _to_wire(name: str, settings: Mapping[str, Any]) -> na.Namespace:
    message = na.Namespace(name=name, description=settings.get("description") or "")
    for keyword, (group, field) in NAMESPACE_SETTINGS.items():
        value = settings.get(keyword)
        if value is not None:
            setattr(getattr(message, group), field, value)
    return message


def _from_wire(message: na.Namespace) -> NamespaceInfo:
    settings: dict[str, Any] = {"description": message.description}
    for keyword, (group, field) in NAMESPACE_SETTINGS.items():
        part = getattr(message, group)
        settings[keyword] = getattr(part, field) if part.HasField(field) else None
    return NamespaceInfo(
        name=message.name,
        state=NAMESPACE_STATE_FROM_WIRE.get(message.state, "unspecified"),
        created_at=convert.from_timestamp(message.create_time),
        updated_at=convert.from_timestamp(message.update_time),
        settings=NamespaceSettings(**settings),
    )


_MASK_PATHS: Final = {
    "description": "description",
    **{keyword: f"{group}.{field}" for keyword, (group, field) in NAMESPACE_SETTINGS.items()},
}

SETTING_NAMES: Final = tuple(field.name for field in fields(NamespaceSettings))


class RemoteNamespaceAdmin(Client):
    """``NamespaceAdmin`` over gRPC; same options as ``RemoteStore``."""

    def __init__(self, target: str | None = None, **kwargs: Any) -> None:
        super().__init__(target, **kwargs)
        self.stub = na_grpc.NamespaceAdminStub(self.channel)

    async def create_namespace(self, name: str, **settings: Any) -> NamespaceInfo:
        """Creates ``name`` with ``settings`` (``NamespaceSettings`` keywords)."""
        _check_keywords(settings)
        request = na.CreateNamespaceRequest(namespace=_to_wire(name, settings))
        return _from_wire((await self._call(self.stub.CreateNamespace, request)).namespace)

    async def get_namespace(self, name: str) -> NamespaceInfo:
        request = na.GetNamespaceRequest(name=name)
        return _from_wire((await self._call(self.stub.GetNamespace, request)).namespace)

    async def list_namespaces(
        self, *, page_size: int = 0, page_token: str = ""
    ) -> ListPage[NamespaceInfo]:
        request = na.ListNamespacesRequest(page_size=page_size, page_token=page_token)
        response = await self._call(self.stub.ListNamespaces, request)
        return ListPage(
            items=[_from_wire(namespace) for namespace in response.namespaces],
            next_page_token=response.next_page_token,
        )

    async def update_namespace(self, name: str, **changes: Any) -> NamespaceInfo:
        """Sets the ``NamespaceSettings`` keywords given; None clears a setting."""
        _check_keywords(changes)
        if not changes:
            raise ValueError("name at least one setting to change")
        request = na.UpdateNamespaceRequest(
            namespace=_to_wire(name, changes),
            update_mask=field_mask_pb2.FieldMask(paths=[_MASK_PATHS[key] for key in changes]),
        )
        return _from_wire((await self._call(self.stub.UpdateNamespace, request)).namespace)

    async def delete_namespace(self, name: str) -> NamespaceInfo:
        """Refuses new calls into ``name`` at once; its data is purged in the
        background, then the name is tombstoned. Returns it in state ``deleting``."""
        request = na.DeleteNamespaceRequest(name=name)
        return _from_wire((await self._call(self.stub.DeleteNamespace, request)).namespace)


def _check_keywords(settings: Mapping[str, Any]) -> None:
    unknown = set(settings) - set(SETTING_NAMES)
    if unknown:
        raise TypeError(f"unknown namespace setting(s) {sorted(unknown)}; use {SETTING_NAMES}")
