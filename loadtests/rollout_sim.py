"""Tail latency at cluster scale: a simulated fleet on the real scheduler (etude.trainer.fleet).

One scenario — by default 16 engines × 64 concurrent sequences, 512 rollouts per step in
groups of 8, heavy-tailed episodes (p99/p50 of generated tokens ≈ 10), the trainer's step
time set so that generation and training are balanced — run under each rollout schedule,
each in a process of its own against the same redis-server:

* `sync` (on-policy: nothing generates while the trainer trains),
* `async` (bounded staleness S; weight updates drain each engine),
* `async_partial` (bounded staleness S; updates land mid-turn: partial rollouts),
* `async_partial` again with round-robin routing instead of the load-aware router.

Engines, sandboxes, grading and the trainer's compute take simulated time; Redis, the
orchestrator, GroupCollector, the rollout worker's agent loop, the router, weight updates
and versions are the real code. Throughput and trainer idle are measured in the steady
state: every sequence slot starts an episode at once, so the steady state begins once that
first cohort has ended, at the end of the first step that ends after the run's p99 episode
(`FleetResult.warmup_steps`); `trainer_idle_async_partial_with_warmup` counts from the end
of the first step instead. Every run must finish without a failed rollout, train at least
three steps (one of them after the warm-up) and keep its event loop punctual, or the
benchmark fails.

    python loadtests/rollout_sim.py --json out.json          # full, ~11 min on 2 cores
    python loadtests/rollout_sim.py --quick                  # 2 engines, under a minute
    python loadtests/rollout_sim.py --quick --scenario local # the local run's calibration

At 1,024 engines the agent loops would need dozens of cores: loadtests/orchestrator_scale.py
keeps the orchestrator, the RL loop and Redis real and generates the workers' load.

With `--json out.json`, the plot goes to out.png: throughput and trainer idle by schedule,
and the staleness histogram of `async_partial`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchlib import argument_parser, metric, percentile, print_metrics, write_json

from etude.common.redis_server import RedisServer
from etude.sim.scenario import load_scenario
from etude.trainer.fleet import FleetPlan, FleetResult, SimulatedFleet, balanced_trainer

MAX_STALENESS = 8


@dataclass(frozen=True, slots=True)
class Size:
    engines: int
    groups_per_step: int
    over_provision: int
    simulated_seconds: float
    time_scale: float


# Long enough that the first steps' warm-up (every engine starting at once, nothing yet
# carried over) is a small part of the steady state measured.
FULL = Size(engines=16, groups_per_step=64, over_provision=128, simulated_seconds=5400,
            time_scale=20)  # fmt: skip
QUICK = Size(engines=2, groups_per_step=8, over_provision=24, simulated_seconds=4500,
             time_scale=190)  # fmt: skip
RUNS = (
    ("sync", "sync", "load_aware"),
    ("async", "async", "load_aware"),
    ("async_partial", "async_partial", "load_aware"),
    ("round_robin", "async_partial", "round_robin"),
)


class FailedRun(RuntimeError):
    pass


def check(name: str, result: FleetResult, size: Size) -> None:
    """A run whose figures would mislead: failed rollouts, too few steps, or an event loop
    so busy that its lateness (simulated time is real time scaled) distorts episodes."""
    if result.failed_rollouts:
        raise FailedRun(f"{name}: {result.failed_rollouts} rollouts failed")
    if result.steps < 3 or result.steady_steps < 1:
        raise FailedRun(
            f"{name}: {result.steps} steps, {result.steady_steps} after the warm-up (3 or more"
            " steps, one at least in the steady state): run longer"
        )
    late = result.loop_lag_p99 * size.time_scale
    typical = percentile(result.episode_seconds, 50)
    if late > 0.025 * typical:
        raise FailedRun(
            f"{name}: the event loop's p99 lag is {late:.2f} simulated seconds, over 2.5% of a"
            f" median episode ({typical:.0f} s): lower the time scale"
        )
    if name == "sync" and not result.sync_never_stale:
        raise FailedRun("sync trained a token older than its step")


def run_one(name: str, schedule: str, routing: str, size: Size, scenario_name: str,
            redis_url: str) -> FleetResult:  # fmt: skip
    """One schedule's run, in a process of its own."""
    plan = FleetPlan(
        engines=size.engines, schedule=schedule, routing=routing,
        groups_per_step=size.groups_per_step, over_provision=size.over_provision,
        max_staleness=MAX_STALENESS, simulated_seconds=size.simulated_seconds,
    )  # fmt: skip
    scenario = balanced_trainer(load_scenario(scenario_name, time_scale=size.time_scale), plan)
    started = time.perf_counter()
    result = asyncio.run(SimulatedFleet(scenario, redis_url, plan, f"sim-{name}").run())
    waits = " ".join(f"{w:.0f}" for w in result.step_waited)
    print(
        f"{name}: {result.steps} steps, {result.trained} trained,"
        f" {time.perf_counter() - started:.0f} s; the trainer waited [{waits}] simulated s,"
        f" {result.warmup_steps} steps of warm-up",
        flush=True,
    )
    return result


def run_all(size: Size, scenario_name: str, only: set[str] | None) -> dict[str, FleetResult]:
    """Every schedule against one redis-server, each in a process of its own, as many at once
    as there are cores (a run keeps about one busy): the event loops stay punctual."""
    runs = [run for run in RUNS if not only or run[0] in only]
    workers = max(1, min(len(runs), os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="etude-sim-") as data_dir:
        server = RedisServer(data_dir=Path(data_dir)).start()
        try:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                futures = {
                    name: pool.submit(
                        run_one, name, schedule, routing, size, scenario_name, server.url
                    )
                    for name, schedule, routing in runs
                }
                results = {name: future.result() for name, future in futures.items()}
        finally:
            server.stop()
    for name, result in results.items():
        check(name, result, size)
    return results


def figures(results: dict[str, FleetResult], size: Size) -> dict:
    out: dict[str, dict] = {}
    sync = results.get("sync")
    partial = results.get("async_partial")
    for name in ("sync", "async", "async_partial"):
        if name in results:
            out[f"throughput_{name}"] = metric(results[name].throughput_per_hour, "trajectories/h")
    if sync and partial:
        out["speedup_async_partial_vs_sync"] = metric(
            partial.throughput_per_hour / sync.throughput_per_hour, "x",
            baseline=sync.throughput_per_hour, target=2.5,
        )  # fmt: skip
    if sync:
        out["trainer_idle_sync"] = metric(sync.trainer_idle, "fraction")
    if partial:
        out["trainer_idle_async_partial"] = metric(partial.trainer_idle, "fraction", target=0.10)
        out["trainer_idle_async_partial_with_warmup"] = metric(
            partial.trainer_idle_with_warmup, "fraction"
        )
        out["warmup_steps_async_partial"] = metric(partial.warmup_steps, "steps")
        out["staleness_p99_async_partial"] = metric(
            percentile([float(s) for s in partial.staleness], 99), "versions",
            target=MAX_STALENESS,
        )  # fmt: skip
        out["staleness_in_flight_p99_async_partial"] = metric(
            percentile([float(s) for s in partial.in_flight], 99), "versions"
        )
        trained_groups = partial.trained // partial.plan.group_size
        out["stale_dropped_share_async_partial"] = metric(
            partial.stale_groups / max(1, trained_groups + partial.stale_groups), "fraction"
        )
        out["stale_token_share_async_partial"] = metric(
            partial.stale_tokens / max(1, partial.sampled_tokens), "fraction"
        )
        out["episode_p50_s"] = metric(percentile(partial.episode_seconds, 50), "s")
        out["episode_p99_s"] = metric(percentile(partial.episode_seconds, 99), "s")
        out["routing_prefix_hit_rate"] = metric(partial.prefix_hit_rate, "fraction")
        out["engine_occupancy_async_partial"] = metric(partial.occupancy, "fraction")
    if partial and "round_robin" in results:
        robin = results["round_robin"]
        out["round_robin_prefix_hit_rate"] = metric(robin.prefix_hit_rate, "fraction")
        out["speedup_routing_vs_round_robin"] = metric(
            partial.throughput_per_hour / robin.throughput_per_hour, "x",
            baseline=robin.throughput_per_hour, target=1.2,
        )  # fmt: skip
    busiest = max(results.values(), key=lambda r: r.cpu_seconds / max(r.real_seconds, 1e-9))
    out["queue_entries_per_s"] = metric(busiest.queue_entries / busiest.real_seconds, "entries/s")
    out["process_cpu_busiest"] = metric(busiest.cpu_seconds / busiest.real_seconds, "cores")
    out["loop_lag_p99_simulated_s"] = metric(
        max(r.loop_lag_p99 for r in results.values()) * size.time_scale, "s"
    )
    return out


def plot(results: dict[str, FleetResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4))
    left.bar(names, [results[n].throughput_per_hour for n in names], color="#4c72b0")
    left.set_title("trained trajectories per simulated hour")
    middle.bar(names, [results[n].trainer_idle for n in names], color="#dd8452")
    middle.axhline(0.10, color="grey", linestyle="--", linewidth=1)
    middle.set_title("trainer idle: waiting for groups or weights")
    for axis in (left, middle):
        axis.tick_params(axis="x", rotation=20)
    if "async_partial" in results:
        staleness = results["async_partial"].staleness
        right.hist(staleness, bins=range(0, max(staleness, default=0) + 2), color="#55a868",
                   align="left", edgecolor="white")  # fmt: skip
        right.axvline(MAX_STALENESS + 0.5, color="grey", linestyle="--", linewidth=1)
        right.set_title("async_partial: staleness per trajectory")
        right.set_xlabel("versions behind the trainer")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--scenario", default="default", help="bundled name or YAML file")
    parser.add_argument("--engines", type=int, help="simulated engines (default 16; quick 2)")
    parser.add_argument("--time-scale", type=float, help="simulated seconds per real second")
    parser.add_argument("--only", action="append", choices=[r[0] for r in RUNS],
                        help="run only these (repeatable)")  # fmt: skip
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    if args.engines:
        scale = args.engines / size.engines
        size = Size(
            args.engines,
            round(size.groups_per_step * scale),
            round(size.over_provision * scale),
            size.simulated_seconds,
            size.time_scale,
        )
    if args.time_scale:
        size = Size(size.engines, size.groups_per_step, size.over_provision,
                    size.simulated_seconds, args.time_scale)  # fmt: skip
    results = run_all(size, args.scenario, set(args.only or ()))
    out = figures(results, size)
    print_metrics(
        f"rollout_sim: {size.engines} engines × 64 sequences,"
        f" {size.groups_per_step * 8} rollouts/step, S = {MAX_STALENESS}", out,
    )  # fmt: skip
    plan = {"engines": size.engines, "groups_per_step": size.groups_per_step, "group_size": 8,
            "over_provision": size.over_provision, "max_staleness": MAX_STALENESS,
            "simulated_seconds": size.simulated_seconds, "time_scale": size.time_scale,
            "scenario": args.scenario}  # fmt: skip
    write_json(args.json, "rollout_sim", out, plan=plan)
    if args.json:
        plot(results, Path(args.json).with_suffix(".png"))


if __name__ == "__main__":
    main()
