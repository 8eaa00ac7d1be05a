from runstore.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoadSessionStatusRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class LoadSessionStatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.SessionStatus
    def __init__(self, status: _Optional[_Union[_types_pb2.SessionStatus, str]] = ...) -> None: ...

class StartRootRunRequest(_message.Message):
    __slots__ = ("run", "started", "canceled")
    RUN_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.RunStart
    started: _types_pb2.RunRecord
    canceled: _types_pb2.RunRecord
    def __init__(self, run: _Optional[_Union[_types_pb2.RunStart, _Mapping]] = ..., started: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ..., canceled: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class StartRootRunResponse(_message.Message):
    __slots__ = ("outcome", "started", "canceled")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    outcome: _types_pb2.RunStartOutcome
    started: _types_pb2.AppendResult
    canceled: _types_pb2.AppendResult
    def __init__(self, outcome: _Optional[_Union[_types_pb2.RunStartOutcome, str]] = ..., started: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ..., canceled: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class StartChildRunRequest(_message.Message):
    __slots__ = ("run", "parent_linked", "started", "canceled")
    RUN_FIELD_NUMBER: _ClassVar[int]
    PARENT_LINKED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.RunStart
    parent_linked: _types_pb2.RunRecord
    started: _types_pb2.RunRecord
    canceled: _types_pb2.RunRecord
    def __init__(self, run: _Optional[_Union[_types_pb2.RunStart, _Mapping]] = ..., parent_linked: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ..., started: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ..., canceled: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class StartChildRunResponse(_message.Message):
    __slots__ = ("outcome", "parent_record", "started", "canceled")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PARENT_RECORD_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    outcome: _types_pb2.RunStartOutcome
    parent_record: _types_pb2.AppendResult
    started: _types_pb2.AppendResult
    canceled: _types_pb2.AppendResult
    def __init__(self, outcome: _Optional[_Union[_types_pb2.RunStartOutcome, str]] = ..., parent_record: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ..., started: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ..., canceled: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class StartOneShotRunRequest(_message.Message):
    __slots__ = ("run", "started")
    RUN_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.RunStart
    started: _types_pb2.RunRecord
    def __init__(self, run: _Optional[_Union[_types_pb2.RunStart, _Mapping]] = ..., started: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class StartOneShotRunResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: _types_pb2.AppendResult
    def __init__(self, record: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class StartOneShotChildRunRequest(_message.Message):
    __slots__ = ("run", "parent_linked", "started")
    RUN_FIELD_NUMBER: _ClassVar[int]
    PARENT_LINKED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.RunStart
    parent_linked: _types_pb2.RunRecord
    started: _types_pb2.RunRecord
    def __init__(self, run: _Optional[_Union[_types_pb2.RunStart, _Mapping]] = ..., parent_linked: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ..., started: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class StartOneShotChildRunResponse(_message.Message):
    __slots__ = ("parent_record", "started")
    PARENT_RECORD_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    parent_record: _types_pb2.AppendResult
    started: _types_pb2.AppendResult
    def __init__(self, parent_record: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ..., started: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class AppendRunRecordRequest(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: _types_pb2.RunRecord
    def __init__(self, record: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class AppendRunRecordResponse(_message.Message):
    __slots__ = ("id", "inserted", "session_status")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    inserted: bool
    session_status: _types_pb2.SessionStatus
    def __init__(self, id: _Optional[str] = ..., inserted: _Optional[bool] = ..., session_status: _Optional[_Union[_types_pb2.SessionStatus, str]] = ...) -> None: ...

class RecordRunCancellationRequest(_message.Message):
    __slots__ = ("run_id", "reason", "record")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    record: _types_pb2.RunRecord
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ..., record: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class RecordRunCancellationResponse(_message.Message):
    __slots__ = ("id", "inserted", "session_status")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    inserted: bool
    session_status: _types_pb2.SessionStatus
    def __init__(self, id: _Optional[str] = ..., inserted: _Optional[bool] = ..., session_status: _Optional[_Union[_types_pb2.SessionStatus, str]] = ...) -> None: ...

class RecordRunSuspensionRequest(_message.Message):
    __slots__ = ("run_id", "suspension", "record")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SUSPENSION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    suspension: _types_pb2.Checkpoint
    record: _types_pb2.RunRecord
    def __init__(self, run_id: _Optional[str] = ..., suspension: _Optional[_Union[_types_pb2.Checkpoint, _Mapping]] = ..., record: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class RecordRunSuspensionResponse(_message.Message):
    __slots__ = ("id", "inserted", "session_status")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    inserted: bool
    session_status: _types_pb2.SessionStatus
    def __init__(self, id: _Optional[str] = ..., inserted: _Optional[bool] = ..., session_status: _Optional[_Union[_types_pb2.SessionStatus, str]] = ...) -> None: ...

class RecordRunTerminalRequest(_message.Message):
    __slots__ = ("run_id", "status", "record")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    status: _types_pb2.RunStatus
    record: _types_pb2.RunRecord
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[_types_pb2.RunStatus, str]] = ..., record: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class RecordRunTerminalResponse(_message.Message):
    __slots__ = ("id", "inserted", "session_status")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    inserted: bool
    session_status: _types_pb2.SessionStatus
    def __init__(self, id: _Optional[str] = ..., inserted: _Optional[bool] = ..., session_status: _Optional[_Union[_types_pb2.SessionStatus, str]] = ...) -> None: ...

class RepairRunSuspensionRequest(_message.Message):
    __slots__ = ("run_id", "suspension", "record")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SUSPENSION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    suspension: _types_pb2.Checkpoint
    record: _types_pb2.RunRecord
    def __init__(self, run_id: _Optional[str] = ..., suspension: _Optional[_Union[_types_pb2.Checkpoint, _Mapping]] = ..., record: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class RepairRunSuspensionResponse(_message.Message):
    __slots__ = ("outcome", "status", "record")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    outcome: _types_pb2.RunRepairOutcome
    status: _types_pb2.RunStatus
    record: _types_pb2.AppendResult
    def __init__(self, outcome: _Optional[_Union[_types_pb2.RunRepairOutcome, str]] = ..., status: _Optional[_Union[_types_pb2.RunStatus, str]] = ..., record: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class RepairRunTerminalRequest(_message.Message):
    __slots__ = ("run_id", "status", "record")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    status: _types_pb2.RunStatus
    record: _types_pb2.RunRecord
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[_types_pb2.RunStatus, str]] = ..., record: _Optional[_Union[_types_pb2.RunRecord, _Mapping]] = ...) -> None: ...

class RepairRunTerminalResponse(_message.Message):
    __slots__ = ("outcome", "status", "record")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    outcome: _types_pb2.RunRepairOutcome
    status: _types_pb2.RunStatus
    record: _types_pb2.AppendResult
    def __init__(self, outcome: _Optional[_Union[_types_pb2.RunRepairOutcome, str]] = ..., status: _Optional[_Union[_types_pb2.RunStatus, str]] = ..., record: _Optional[_Union[_types_pb2.AppendResult, _Mapping]] = ...) -> None: ...

class LoadRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class LoadRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _types_pb2.RunMeta
    def __init__(self, run: _Optional[_Union[_types_pb2.RunMeta, _Mapping]] = ...) -> None: ...

class LoadRunSuspensionRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class LoadRunSuspensionResponse(_message.Message):
    __slots__ = ("suspension",)
    SUSPENSION_FIELD_NUMBER: _ClassVar[int]
    suspension: _types_pb2.Checkpoint
    def __init__(self, suspension: _Optional[_Union[_types_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class ListRunRecordsRequest(_message.Message):
    __slots__ = ("run_id", "cursor", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    cursor: str
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListRunRecordsResponse(_message.Message):
    __slots__ = ("events", "next_cursor")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_types_pb2.RunRecord]
    next_cursor: str
    def __init__(self, events: _Optional[_Iterable[_Union[_types_pb2.RunRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class ListSessionRunRecordsRequest(_message.Message):
    __slots__ = ("session_id", "cursor", "limit")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    cursor: str
    limit: int
    def __init__(self, session_id: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListSessionRunRecordsResponse(_message.Message):
    __slots__ = ("events", "next_cursor")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_types_pb2.RunRecord]
    next_cursor: str
    def __init__(self, events: _Optional[_Iterable[_Union[_types_pb2.RunRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class ListRunTranscriptRecordsRequest(_message.Message):
    __slots__ = ("run_id", "through_record_id", "after_record_id", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THROUGH_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    through_record_id: str
    after_record_id: str
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., through_record_id: _Optional[str] = ..., after_record_id: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListRunTranscriptRecordsResponse(_message.Message):
    __slots__ = ("events", "next_cursor")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_types_pb2.RunRecord]
    next_cursor: str
    def __init__(self, events: _Optional[_Iterable[_Union[_types_pb2.RunRecord, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...
