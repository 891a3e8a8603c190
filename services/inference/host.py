"""An inference engine as a Ray actor: the whole inference service (gRPC, the OpenAI HTTP
API, /metrics) running inside the actor's event loop, on a fixed port of the node it was
placed on. On a cluster, `etude train --ray --inference-engines N` places one per
inference-gpu worker (custom resource `inference_engine`); the rollout workers reach them
through the chart's headless Service, the trainer publishes weights to each directly.
"""

from __future__ import annotations

import contextlib

from etude.common.grpc_server import ServiceRuntime
from etude.inference.__main__ import build
from etude.inference.config import InferenceSettings


class InferenceHost:
    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        # Settings from the environment of the node the actor runs on (the chart sets
        # ETUDE_INFERENCE__* on the inference-gpu workers), bound where peers reach it.
        settings = InferenceSettings()
        grpc = settings.grpc.model_copy(update={"host": host, "port": port})
        self.settings = settings.model_copy(update={"grpc": grpc})
        self.resources = contextlib.AsyncExitStack()
        self.runtime: ServiceRuntime | None = None

    async def start(self) -> str:
        """Serve; returns the engine's address as other nodes reach it (`ip:port`)."""
        import ray

        registrations = await build(self.settings, self.resources)
        self.runtime = ServiceRuntime("inference", self.settings.grpc, registrations)
        await self.runtime.start()
        return f"{ray.util.get_node_ip_address()}:{self.runtime.port}"

    async def stop(self) -> None:
        if self.runtime is not None:
            await self.runtime.shutdown()
        await self.resources.aclose()
