from etude.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: _common_pb2.RunId
    def __init__(self, run_id: _Optional[_Union[_common_pb2.RunId, _Mapping]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("run_id", "step", "policy_version", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    run_id: _common_pb2.RunId
    step: int
    policy_version: _common_pb2.PolicyVersion
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, run_id: _Optional[_Union[_common_pb2.RunId, _Mapping]] = ..., step: _Optional[int] = ..., policy_version: _Optional[_Union[_common_pb2.PolicyVersion, _Mapping]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: _common_pb2.RunId
    def __init__(self, run_id: _Optional[_Union[_common_pb2.RunId, _Mapping]] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("path", "step")
    PATH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    path: str
    step: int
    def __init__(self, path: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...
