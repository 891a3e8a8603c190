"""Where a run's Ray actors go (`etude train --ray`). On a cluster the driver joins the Ray
cluster, and the custom resources the chart's worker groups advertise place the actors: the
trainer on the `trainer` worker, one inference engine per `inference_engine` worker. Without
a cluster a local `ray.init` declares the same resources, so the same code runs on one
machine. Ray is an extra: it is imported only when a run asks for it.
"""

from __future__ import annotations

from typing import Any

from etude.common.run_config import RunConfig
from etude.common.settings import EtudeSettings
from etude.inference.host import InferenceHost
from etude.rollout.config import RolloutServiceConfig, RolloutSettings
from etude.rollout.host import RolloutHost
from etude.trainer.host import TrainerHost
from etude.trainer.types import Endpoints, Placement


def init_ray(placement: Placement | None) -> None:
    """Join the Ray cluster of a cluster run, else start one on this machine."""
    import ray

    if placement is not None:
        try:  # a KubeRay job's submitter or a pod of the cluster: join it
            ray.init(address="auto", log_to_driver=False)
            return
        except ConnectionError:
            pass  # no Ray cluster here: a local one stands in for it
    # This machine: declare the placement resources the chart's worker groups have.
    engines = placement.inference_engines if placement else 0
    resources = {"trainer": 1} | ({"inference_engine": engines} if engines else {})
    ray.init(num_cpus=2, resources=resources, include_dashboard=False,
             log_to_driver=False, ignore_reinit_error=True)  # fmt: skip


def inference_engines(placement: Placement) -> list[Any]:
    """The engine actors, one per `inference_engine` worker; `start.remote()` serves and
    returns the engine's address."""
    import ray

    actor = ray.remote(InferenceHost).options(
        num_cpus=0, num_gpus=placement.engine_gpus, resources={"inference_engine": 1}
    )
    return [actor.remote(placement.engine_port) for _ in range(placement.inference_engines)]


def trainer_actor(
    run_id: str, run: RunConfig, endpoints: Endpoints, settings: EtudeSettings,
    placement: Placement | None,
) -> Any:  # fmt: skip
    import ray

    # Several calls at once: the driver reads progress while `rl()` runs.
    options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 4}
    if placement is not None:
        options |= {"num_gpus": placement.trainer_gpus, "resources": {"trainer": 1}}
    return ray.remote(TrainerHost).options(**options).remote(run_id, run, endpoints, settings)


def rollout_actors(
    run_id: str, run: RunConfig, endpoints: Endpoints, settings: EtudeSettings, count: int
) -> list[Any]:
    """`count` rollout workers of the run on the local Ray (a cluster's are deployed)."""
    import ray

    shared = RolloutSettings(**{
        **settings.model_dump(),
        "redis": {"url": endpoints.redis_url},
        "services": {"inference": ",".join(endpoints.inference),
                     "environment": endpoints.environment,
                     "reward": endpoints.reward},
    })  # fmt: skip
    actor = ray.remote(RolloutHost).options(num_cpus=0, max_concurrency=4)
    workers = []
    for i in range(count):
        section = RolloutServiceConfig(run_id=run_id, consumer=f"ray-{i}")
        workers.append(actor.remote(shared.model_copy(update={"rollout": section}), run))
    return workers
