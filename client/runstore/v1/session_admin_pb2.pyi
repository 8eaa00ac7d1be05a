import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from runstore.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSessionRequest(_message.Message):
    __slots__ = ("session_id", "created_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _types_pb2.Session
    def __init__(self, session: _Optional[_Union[_types_pb2.Session, _Mapping]] = ...) -> None: ...

class LoadSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class LoadSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _types_pb2.Session
    def __init__(self, session: _Optional[_Union[_types_pb2.Session, _Mapping]] = ...) -> None: ...

class EndSessionRequest(_message.Message):
    __slots__ = ("session_id", "ended_at")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ended_at: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EndSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _types_pb2.Session
    def __init__(self, session: _Optional[_Union[_types_pb2.Session, _Mapping]] = ...) -> None: ...

class PurgeSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class PurgeSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunsBySessionRequest(_message.Message):
    __slots__ = ("session_id", "statuses")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_types_pb2.RunStatus]
    def __init__(self, session_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_types_pb2.RunStatus, str]]] = ...) -> None: ...

class ListRunsBySessionResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.RunMeta]
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.RunMeta, _Mapping]]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("statuses", "created_after", "created_before", "page_size", "page_token")
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[_types_pb2.SessionStatus]
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, statuses: _Optional[_Iterable[_Union[_types_pb2.SessionStatus, str]]] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_types_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_types_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("session_id", "agent_id", "statuses", "started_after", "started_before", "sessionless_only", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    STARTED_AFTER_FIELD_NUMBER: _ClassVar[int]
    STARTED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SESSIONLESS_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    agent_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_types_pb2.RunStatus]
    started_after: _timestamp_pb2.Timestamp
    started_before: _timestamp_pb2.Timestamp
    sessionless_only: bool
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_types_pb2.RunStatus, str]]] = ..., started_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sessionless_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_types_pb2.RunMeta]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_types_pb2.RunMeta, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
