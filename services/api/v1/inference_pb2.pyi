from etude.api.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_CANCELLED: _ClassVar[FinishReason]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_CANCELLED: FinishReason

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed", "n", "stop_token_ids")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    n: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., n: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "prompt_text", "sampling")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt_text: str
    sampling: SamplingParams
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., prompt_text: _Optional[str] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ...) -> None: ...

class GenerateChunk(_message.Message):
    __slots__ = ("index", "token_ids", "logprobs", "policy_versions", "text", "finish_reason")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    policy_versions: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finish_reason: FinishReason
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., policy_versions: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ...) -> None: ...

class WeightChunk(_message.Message):
    __slots__ = ("version", "name", "dtype", "shape", "offset", "data", "drain", "run_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.PolicyVersion
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    data: bytes
    drain: bool
    run_id: str
    def __init__(self, version: _Optional[_Union[_common_pb2.PolicyVersion, _Mapping]] = ..., name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., drain: _Optional[bool] = ..., run_id: _Optional[str] = ...) -> None: ...

class UpdateWeightsResponse(_message.Message):
    __slots__ = ("version", "tensors_updated", "seconds")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_UPDATED_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.PolicyVersion
    tensors_updated: int
    seconds: float
    def __init__(self, version: _Optional[_Union[_common_pb2.PolicyVersion, _Mapping]] = ..., tensors_updated: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyInfo(_message.Message):
    __slots__ = ("version", "model_name", "backend", "num_parameters", "run_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.PolicyVersion
    model_name: str
    backend: str
    num_parameters: int
    run_id: str
    def __init__(self, version: _Optional[_Union[_common_pb2.PolicyVersion, _Mapping]] = ..., model_name: _Optional[str] = ..., backend: _Optional[str] = ..., num_parameters: _Optional[int] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetLoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EngineLoad(_message.Message):
    __slots__ = ("version", "running", "waiting", "capacity", "kv_cache_usage", "draining")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    version: _common_pb2.PolicyVersion
    running: int
    waiting: int
    capacity: int
    kv_cache_usage: float
    draining: bool
    def __init__(self, version: _Optional[_Union[_common_pb2.PolicyVersion, _Mapping]] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., capacity: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., draining: _Optional[bool] = ...) -> None: ...
