import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemoryEvent(_message.Message):
    __slots__ = ("type", "timestamp", "data", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    type: str
    timestamp: _timestamp_pb2.Timestamp
    data: bytes
    labels: _containers.ScalarMap[str, str]
    def __init__(self, type: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data: _Optional[bytes] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MemoryLoadRunRequest(_message.Message):
    __slots__ = ("agent_id", "run_id", "cursor", "limit")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    run_id: str
    cursor: str
    limit: int
    def __init__(self, agent_id: _Optional[str] = ..., run_id: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class MemoryLoadRunResponse(_message.Message):
    __slots__ = ("agent_id", "run_id", "events", "meta", "next_cursor")
    class MetaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    run_id: str
    events: _containers.RepeatedCompositeFieldContainer[MemoryEvent]
    meta: _containers.ScalarMap[str, str]
    next_cursor: str
    def __init__(self, agent_id: _Optional[str] = ..., run_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[MemoryEvent, _Mapping]]] = ..., meta: _Optional[_Mapping[str, str]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class AppendEventsRequest(_message.Message):
    __slots__ = ("agent_id", "run_id", "events", "idempotency_key")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    run_id: str
    events: _containers.RepeatedCompositeFieldContainer[MemoryEvent]
    idempotency_key: str
    def __init__(self, agent_id: _Optional[str] = ..., run_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[MemoryEvent, _Mapping]]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class AppendEventsResponse(_message.Message):
    __slots__ = ("first_position", "count", "inserted")
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    first_position: int
    count: int
    inserted: bool
    def __init__(self, first_position: _Optional[int] = ..., count: _Optional[int] = ..., inserted: _Optional[bool] = ...) -> None: ...
