import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATUS_UNSPECIFIED: _ClassVar[SessionStatus]
    SESSION_STATUS_ACTIVE: _ClassVar[SessionStatus]
    SESSION_STATUS_ENDED: _ClassVar[SessionStatus]

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_SUSPENDED: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELED: _ClassVar[RunStatus]

class RunStartOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_START_OUTCOME_UNSPECIFIED: _ClassVar[RunStartOutcome]
    RUN_START_OUTCOME_PROCEED: _ClassVar[RunStartOutcome]
    RUN_START_OUTCOME_STOP: _ClassVar[RunStartOutcome]

class RunRepairOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_REPAIR_OUTCOME_UNSPECIFIED: _ClassVar[RunRepairOutcome]
    RUN_REPAIR_OUTCOME_STORED: _ClassVar[RunRepairOutcome]
    RUN_REPAIR_OUTCOME_ALREADY_STORED: _ClassVar[RunRepairOutcome]
    RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL: _ClassVar[RunRepairOutcome]
SESSION_STATUS_UNSPECIFIED: SessionStatus
SESSION_STATUS_ACTIVE: SessionStatus
SESSION_STATUS_ENDED: SessionStatus
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_SUSPENDED: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELED: RunStatus
RUN_START_OUTCOME_UNSPECIFIED: RunStartOutcome
RUN_START_OUTCOME_PROCEED: RunStartOutcome
RUN_START_OUTCOME_STOP: RunStartOutcome
RUN_REPAIR_OUTCOME_UNSPECIFIED: RunRepairOutcome
RUN_REPAIR_OUTCOME_STORED: RunRepairOutcome
RUN_REPAIR_OUTCOME_ALREADY_STORED: RunRepairOutcome
RUN_REPAIR_OUTCOME_DIFFERENT_TERMINAL: RunRepairOutcome

class Session(_message.Message):
    __slots__ = ("id", "status", "created_at", "ended_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: SessionStatus
    created_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunStart(_message.Message):
    __slots__ = ("run_id", "agent_id", "session_id", "parent_run_id", "predecessor_run_id", "started_at", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PREDECESSOR_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    predecessor_run_id: str
    started_at: _timestamp_pb2.Timestamp
    labels: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., predecessor_run_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RunRecord(_message.Message):
    __slots__ = ("id", "event_key", "run_id", "agent_id", "session_id", "turn_id", "type", "payload", "timestamp")
    ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    id: str
    event_key: str
    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    type: str
    payload: bytes
    timestamp: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., event_key: _Optional[str] = ..., run_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., type: _Optional[str] = ..., payload: _Optional[bytes] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AppendResult(_message.Message):
    __slots__ = ("id", "inserted", "session_status")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    inserted: bool
    session_status: SessionStatus
    def __init__(self, id: _Optional[str] = ..., inserted: _Optional[bool] = ..., session_status: _Optional[_Union[SessionStatus, str]] = ...) -> None: ...

class RunMeta(_message.Message):
    __slots__ = ("run_id", "agent_id", "session_id", "parent_run_id", "started_at", "labels", "start_outcome", "status", "cancellation_reason", "updated_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    START_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CANCELLATION_REASON_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    agent_id: str
    session_id: str
    parent_run_id: str
    started_at: _timestamp_pb2.Timestamp
    labels: _containers.ScalarMap[str, str]
    start_outcome: RunStartOutcome
    status: RunStatus
    cancellation_reason: str
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., session_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., start_outcome: _Optional[_Union[RunStartOutcome, str]] = ..., status: _Optional[_Union[RunStatus, str]] = ..., cancellation_reason: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("id", "data")
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    data: bytes
    def __init__(self, id: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...
