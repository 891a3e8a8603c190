from etude.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSessionRequest(_message.Message):
    __slots__ = ("task_id", "repository_path", "idle_ttl_seconds", "python_environment")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_PATH_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PYTHON_ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    task_id: _common_pb2.TaskId
    repository_path: str
    idle_ttl_seconds: float
    python_environment: str
    def __init__(self, task_id: _Optional[_Union[_common_pb2.TaskId, _Mapping]] = ..., repository_path: _Optional[str] = ..., idle_ttl_seconds: _Optional[float] = ..., python_environment: _Optional[str] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session_id", "workspace_mode", "sandbox_backend")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_MODE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_BACKEND_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    workspace_mode: str
    sandbox_backend: str
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ..., workspace_mode: _Optional[str] = ..., sandbox_backend: _Optional[str] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("session_id", "calls", "parallel")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    calls: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolCall]
    parallel: bool
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ..., calls: _Optional[_Iterable[_Union[_common_pb2.ToolCall, _Mapping]]] = ..., parallel: _Optional[bool] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolResult]
    def __init__(self, results: _Optional[_Iterable[_Union[_common_pb2.ToolResult, _Mapping]]] = ...) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ...) -> None: ...

class DiffRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ...) -> None: ...

class DiffResponse(_message.Message):
    __slots__ = ("unified_diff", "changed_paths")
    UNIFIED_DIFF_FIELD_NUMBER: _ClassVar[int]
    CHANGED_PATHS_FIELD_NUMBER: _ClassVar[int]
    unified_diff: str
    changed_paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, unified_diff: _Optional[str] = ..., changed_paths: _Optional[_Iterable[str]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ToolDescription(_message.Message):
    __slots__ = ("name", "description", "required", "optional")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    required: _containers.RepeatedScalarFieldContainer[str]
    optional: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., required: _Optional[_Iterable[str]] = ..., optional: _Optional[_Iterable[str]] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "path_rules")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    PATH_RULES_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDescription]
    path_rules: str
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDescription, _Mapping]]] = ..., path_rules: _Optional[str] = ...) -> None: ...
