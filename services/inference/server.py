"""gRPC servicer of the inference service: protobuf in, plain requests to `Serving`, chunks
out. Errors become status codes here and nowhere else."""

from __future__ import annotations

import time

import grpc

from etude.api.v1 import common_pb2, inference_pb2, inference_pb2_grpc
from etude.common.grpc_server import Registration
from etude.inference.serving import Serving
from etude.inference.types import (
    EngineDeadError,
    EngineFault,
    InferenceError,
    PolicyOwnedError,
)
from etude.inference.weight_stream import WeightStreamError, assemble, decode_chunk
from etude.inference.wire import chunk_to_proto, load_to_proto, request_from_proto

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name


class InferenceServicer(inference_pb2_grpc.InferenceServiceServicer):
    def __init__(self, serving: Serving, max_update_bytes: int) -> None:
        self.serving = serving
        self.backend = serving.backend
        self.max_update_bytes = max_update_bytes

    async def Generate(self, request, context):
        try:
            generation = request_from_proto(request, self.backend.tokenizer)
            stream = self.serving.generate(generation)
            first = await anext(stream)
        except EngineDeadError as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except InferenceError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except EngineFault as error:  # this request failed; the engine goes on serving
            await context.abort(grpc.StatusCode.INTERNAL, str(error))
        except RuntimeError as error:  # the engine died
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        # A client that goes away cancels this handler; closing the stream frees the cache.
        try:
            yield chunk_to_proto(first)
            async for delta in stream:
                yield chunk_to_proto(delta)
        except EngineDeadError as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except EngineFault as error:
            await context.abort(grpc.StatusCode.INTERNAL, str(error))
        finally:
            await stream.aclose()

    async def UpdateWeights(self, request_iterator, context):
        started = time.perf_counter()
        try:
            update = await assemble(request_iterator, self.max_update_bytes)
            version = update.version
            loaded, seconds = await self.serving.update_weights(
                version, update.tensors, started, drain=update.drain, run_id=update.run_id
            )
        except EngineDeadError as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except (WeightStreamError, InferenceError) as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except PolicyOwnedError as error:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
        return inference_pb2.UpdateWeightsResponse(
            version=common_pb2.PolicyVersion(version=version),
            tensors_updated=loaded,
            seconds=seconds,
        )

    async def GetPolicy(self, request, context):
        return inference_pb2.PolicyInfo(
            version=common_pb2.PolicyVersion(version=self.backend.policy_version),
            model_name=self.backend.model_name,
            backend=self.backend.name,
            num_parameters=self.backend.num_parameters,
            run_id=self.serving.ownership.run_id,
        )

    async def GetLoad(self, request, context):
        return load_to_proto(self.serving.load())


def add_to_server(servicer: InferenceServicer, server: grpc.aio.Server) -> None:
    """The generated `add_InferenceServiceServicer_to_server`, except that UpdateWeights'
    messages are decoded by `decode_chunk`, which leaves the tensor bytes in the received
    buffer, rather than by `WeightChunk.FromString`, which copies them twice."""
    pb = inference_pb2
    handlers = {
        "Generate": grpc.unary_stream_rpc_method_handler(
            servicer.Generate,
            request_deserializer=pb.GenerateRequest.FromString,
            response_serializer=pb.GenerateChunk.SerializeToString,
        ),
        "UpdateWeights": grpc.stream_unary_rpc_method_handler(
            servicer.UpdateWeights,
            request_deserializer=decode_chunk,
            response_serializer=pb.UpdateWeightsResponse.SerializeToString,
        ),
        "GetPolicy": grpc.unary_unary_rpc_method_handler(
            servicer.GetPolicy,
            request_deserializer=pb.GetPolicyRequest.FromString,
            response_serializer=pb.PolicyInfo.SerializeToString,
        ),
        "GetLoad": grpc.unary_unary_rpc_method_handler(
            servicer.GetLoad,
            request_deserializer=pb.GetLoadRequest.FromString,
            response_serializer=pb.EngineLoad.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def registration(servicer: InferenceServicer) -> Registration:
    return Registration(
        servicer,
        add_to_server,
        SERVICE_NAME,
        alive=lambda: servicer.backend.alive,
    )
