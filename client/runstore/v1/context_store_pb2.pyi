import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContextSnapshot(_message.Message):
    __slots__ = ("system_prompt", "summary", "messages")
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    system_prompt: str
    summary: str
    messages: _containers.RepeatedCompositeFieldContainer[ContextMessage]
    def __init__(self, system_prompt: _Optional[str] = ..., summary: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ContextMessage, _Mapping]]] = ...) -> None: ...

class ContextMessage(_message.Message):
    __slots__ = ("type", "content", "meta")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    type: str
    content: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    meta: bytes
    def __init__(self, type: _Optional[str] = ..., content: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ..., meta: _Optional[bytes] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ("type", "text", "image", "document", "thinking", "tool_use", "tool_result", "citations", "cache_checkpoint")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CACHE_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    type: str
    text: TextBlock
    image: ImageBlock
    document: DocumentBlock
    thinking: ThinkingBlock
    tool_use: ToolUseBlock
    tool_result: ToolResultBlock
    citations: CitationsBlock
    cache_checkpoint: CacheCheckpointBlock
    def __init__(self, type: _Optional[str] = ..., text: _Optional[_Union[TextBlock, _Mapping]] = ..., image: _Optional[_Union[ImageBlock, _Mapping]] = ..., document: _Optional[_Union[DocumentBlock, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingBlock, _Mapping]] = ..., tool_use: _Optional[_Union[ToolUseBlock, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultBlock, _Mapping]] = ..., citations: _Optional[_Union[CitationsBlock, _Mapping]] = ..., cache_checkpoint: _Optional[_Union[CacheCheckpointBlock, _Mapping]] = ...) -> None: ...

class TextBlock(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ImageBlock(_message.Message):
    __slots__ = ("format", "data", "url")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    format: str
    data: bytes
    url: str
    def __init__(self, format: _Optional[str] = ..., data: _Optional[bytes] = ..., url: _Optional[str] = ...) -> None: ...

class DocumentBlock(_message.Message):
    __slots__ = ("name", "format", "data", "text", "chunks", "uri", "context", "cite")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CITE_FIELD_NUMBER: _ClassVar[int]
    name: str
    format: str
    data: bytes
    text: str
    chunks: _containers.RepeatedScalarFieldContainer[str]
    uri: str
    context: str
    cite: bool
    def __init__(self, name: _Optional[str] = ..., format: _Optional[str] = ..., data: _Optional[bytes] = ..., text: _Optional[str] = ..., chunks: _Optional[_Iterable[str]] = ..., uri: _Optional[str] = ..., context: _Optional[str] = ..., cite: _Optional[bool] = ...) -> None: ...

class ThinkingBlock(_message.Message):
    __slots__ = ("text", "signature", "redacted", "index", "final")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    text: str
    signature: str
    redacted: bytes
    index: int
    final: bool
    def __init__(self, text: _Optional[str] = ..., signature: _Optional[str] = ..., redacted: _Optional[bytes] = ..., index: _Optional[int] = ..., final: _Optional[bool] = ...) -> None: ...

class ToolUseBlock(_message.Message):
    __slots__ = ("id", "name", "input", "thought_signature")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    THOUGHT_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    input: bytes
    thought_signature: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[bytes] = ..., thought_signature: _Optional[str] = ...) -> None: ...

class ToolResultBlock(_message.Message):
    __slots__ = ("tool_use_id", "content", "is_error")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    content: bytes
    is_error: bool
    def __init__(self, tool_use_id: _Optional[str] = ..., content: _Optional[bytes] = ..., is_error: _Optional[bool] = ...) -> None: ...

class CitationsBlock(_message.Message):
    __slots__ = ("text", "citations")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    text: str
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    def __init__(self, text: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("title", "source", "location", "source_content")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CONTENT_FIELD_NUMBER: _ClassVar[int]
    title: str
    source: str
    location: CitationLocation
    source_content: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, title: _Optional[str] = ..., source: _Optional[str] = ..., location: _Optional[_Union[CitationLocation, _Mapping]] = ..., source_content: _Optional[_Iterable[str]] = ...) -> None: ...

class CitationLocation(_message.Message):
    __slots__ = ("kind", "document_index", "start", "end")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    kind: str
    document_index: int
    start: int
    end: int
    def __init__(self, kind: _Optional[str] = ..., document_index: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class CacheCheckpointBlock(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ("key", "version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: int
    def __init__(self, key: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ("key", "version", "snapshot", "saved_at", "current_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SAVED_AT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    version: int
    snapshot: ContextSnapshot
    saved_at: _timestamp_pb2.Timestamp
    current_version: int
    def __init__(self, key: _Optional[str] = ..., version: _Optional[int] = ..., snapshot: _Optional[_Union[ContextSnapshot, _Mapping]] = ..., saved_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., current_version: _Optional[int] = ...) -> None: ...

class SaveContextRequest(_message.Message):
    __slots__ = ("key", "snapshot", "expected_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    snapshot: ContextSnapshot
    expected_version: int
    def __init__(self, key: _Optional[str] = ..., snapshot: _Optional[_Union[ContextSnapshot, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class SaveContextResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class DeleteContextRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class DeleteContextResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class AppendTranscriptRequest(_message.Message):
    __slots__ = ("key", "messages", "idempotency_key")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    messages: _containers.RepeatedCompositeFieldContainer[ContextMessage]
    idempotency_key: str
    def __init__(self, key: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ContextMessage, _Mapping]]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class AppendTranscriptResponse(_message.Message):
    __slots__ = ("first_position", "count", "inserted")
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    first_position: int
    count: int
    inserted: bool
    def __init__(self, first_position: _Optional[int] = ..., count: _Optional[int] = ..., inserted: _Optional[bool] = ...) -> None: ...

class ListTranscriptRequest(_message.Message):
    __slots__ = ("key", "cursor", "limit")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    key: str
    cursor: str
    limit: int
    def __init__(self, key: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListTranscriptResponse(_message.Message):
    __slots__ = ("messages", "next_cursor")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ContextMessage]
    next_cursor: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ContextMessage, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...
