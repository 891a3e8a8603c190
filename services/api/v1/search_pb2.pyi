from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IndexWorkspaceRequest(_message.Message):
    __slots__ = ("workspace_id", "root_path", "parent_workspace_id")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_PATH_FIELD_NUMBER: _ClassVar[int]
    PARENT_WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    root_path: str
    parent_workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., root_path: _Optional[str] = ..., parent_workspace_id: _Optional[str] = ...) -> None: ...

class IndexWorkspaceResponse(_message.Message):
    __slots__ = ("chunks", "chunks_embedded", "seconds")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_EMBEDDED_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    chunks: int
    chunks_embedded: int
    seconds: float
    def __init__(self, chunks: _Optional[int] = ..., chunks_embedded: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class ChangedFile(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: str
    def __init__(self, path: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class UpdateFilesRequest(_message.Message):
    __slots__ = ("workspace_id", "changed", "deleted_paths")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DELETED_PATHS_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    changed: _containers.RepeatedCompositeFieldContainer[ChangedFile]
    deleted_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workspace_id: _Optional[str] = ..., changed: _Optional[_Iterable[_Union[ChangedFile, _Mapping]]] = ..., deleted_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateFilesResponse(_message.Message):
    __slots__ = ("chunks_embedded", "chunks_removed")
    CHUNKS_EMBEDDED_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    chunks_embedded: int
    chunks_removed: int
    def __init__(self, chunks_embedded: _Optional[int] = ..., chunks_removed: _Optional[int] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("workspace_id", "query", "k", "target_directories", "mode")
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    TARGET_DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    query: str
    k: int
    target_directories: _containers.RepeatedScalarFieldContainer[str]
    mode: str
    def __init__(self, workspace_id: _Optional[str] = ..., query: _Optional[str] = ..., k: _Optional[int] = ..., target_directories: _Optional[_Iterable[str]] = ..., mode: _Optional[str] = ...) -> None: ...

class SearchHit(_message.Message):
    __slots__ = ("path", "start_line", "end_line", "score", "snippet")
    PATH_FIELD_NUMBER: _ClassVar[int]
    START_LINE_FIELD_NUMBER: _ClassVar[int]
    END_LINE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    def __init__(self, path: _Optional[str] = ..., start_line: _Optional[int] = ..., end_line: _Optional[int] = ..., score: _Optional[float] = ..., snippet: _Optional[str] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("hits",)
    HITS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ...) -> None: ...

class DropWorkspaceRequest(_message.Message):
    __slots__ = ("workspace_id",)
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class DropWorkspaceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
