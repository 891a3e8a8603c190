from etude.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreRequest(_message.Message):
    __slots__ = ("session_id", "task_id", "patch", "run_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: _common_pb2.SessionId
    task_id: _common_pb2.TaskId
    patch: str
    run_id: str
    def __init__(self, session_id: _Optional[_Union[_common_pb2.SessionId, _Mapping]] = ..., task_id: _Optional[_Union[_common_pb2.TaskId, _Mapping]] = ..., patch: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class TestOutcome(_message.Message):
    __slots__ = ("test_id", "passed")
    TEST_ID_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    test_id: str
    passed: bool
    def __init__(self, test_id: _Optional[str] = ..., passed: _Optional[bool] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("reward", "components", "fail_to_pass", "pass_to_pass", "seconds", "error")
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REWARD_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    FAIL_TO_PASS_FIELD_NUMBER: _ClassVar[int]
    PASS_TO_PASS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    reward: float
    components: _containers.ScalarMap[str, float]
    fail_to_pass: _containers.RepeatedCompositeFieldContainer[TestOutcome]
    pass_to_pass: _containers.RepeatedCompositeFieldContainer[TestOutcome]
    seconds: float
    error: str
    def __init__(self, reward: _Optional[float] = ..., components: _Optional[_Mapping[str, float]] = ..., fail_to_pass: _Optional[_Iterable[_Union[TestOutcome, _Mapping]]] = ..., pass_to_pass: _Optional[_Iterable[_Union[TestOutcome, _Mapping]]] = ..., seconds: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...
