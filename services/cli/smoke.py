"""`etude up --smoke`: prove a freshly started stack works end to end, then report.

Checks every component's health and each service's /metrics page, sends one entry
through the work queue on the stack's Redis (put with an idempotency key, a repeated put,
get, ack) and confirms the stream ends empty, and drives one environment session through
its tools (write, run, read, diff, close) in a throwaway repository, has codebase_search find
a function the session just wrote (through the search service), has the reward service
grade a bundled task's gold patch, and has the inference service generate a completion
with logprobs over gRPC and over its OpenAI-compatible HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table

from etude.api.v1 import common_pb2, inference_pb2, inference_pb2_grpc, reward_pb2, reward_pb2_grpc
from etude.cli.status import StackStatus
from etude.common.auth import bearer_header
from etude.common.grpc_client import open_channel
from etude.common.ids import new_id
from etude.common.payloads import RolloutRequest
from etude.common.queue import WorkQueue
from etude.common.settings import EtudeSettings
from etude.common.toolcalls import ToolCall
from etude.environment.client import GrpcEnvironment
from etude.tasks.materialize import TASKS_FILE
from etude.tasks.task import read_jsonl


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


def component_checks(status: StackStatus) -> list[Check]:
    checks = [Check(f"{c.name} health", c.health == "SERVING", c.health) for c in status.components]
    for c in status.components:
        if c.metrics_url:
            checks.append(metrics_check(c.name, c.metrics_url))
    return checks


def metrics_check(name: str, url: str) -> Check:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read()
    except OSError as error:
        return Check(f"{name} /metrics", False, str(error))
    return Check(f"{name} /metrics", b"etude_grpc_server" in body, url)


async def queue_round_trip(redis_url: str, settings: EtudeSettings) -> Check:
    run_id = new_id("smoke")
    stream = f"etude:{run_id}:rollouts"
    client = aioredis.from_url(redis_url)
    queue = WorkQueue(client, stream, "rollout", "smoke", (RolloutRequest,), settings.queue)
    started = time.perf_counter()
    try:
        await queue.ensure_group()
        sent = RolloutRequest(
            run_id=run_id, task_id="smoke", group_id="smoke", sample_index=0, min_policy_version=0
        )
        first = await queue.put(sent, key="smoke-0")
        again = await queue.put(sent, key="smoke-0")  # idempotent: no second entry
        deliveries = await queue.get(count=10, block_ms=1000)
        await queue.ack(*(d.entry_id for d in deliveries))
        stats = await queue.stats()
        ok = (
            first == again
            and [d.payload for d in deliveries] == [sent]
            and (stats.depth, stats.pending, stats.dead) == (0, 0, 0)
        )
        millis = (time.perf_counter() - started) * 1000
        return Check("queue put → get → ack", ok, f"{stream}, {millis:.1f} ms")
    finally:
        await client.delete(stream, queue.dead_stream, queue.idempotency_key("smoke-0"))
        await client.aclose()


async def environment_round_trip(address: str, run_dir: Path, settings: EtudeSettings) -> Check:
    repo = run_dir / "tasks" / "smoke-repository"  # under the allowed repository roots
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "hello.py").write_text("print('hello')\n")
    env = GrpcEnvironment(address, settings.client)
    started = time.perf_counter()
    try:
        opened = await env.create_session("smoke", str(repo))
        results = await env.execute(
            opened.session_id,
            [
                ToolCall("write_file", {"path": "made.txt", "content": "made\n"}, "call_0"),
                ToolCall("run_terminal_command", {"command": "python3 hello.py"}, "call_1"),
                ToolCall("read_file", {"path": "made.txt"}, "call_2"),
            ],
        )
        diff = await env.diff(opened.session_id)
        await env.close_session(opened.session_id)
    finally:
        await env.close()
    ok = (
        all(r.result.exit_code == 0 for r in results)
        and results[1].result.output.startswith("hello")
        and "made" in results[2].result.output
        and diff.changed_paths == ["made.txt"]
    )
    millis = (time.perf_counter() - started) * 1000
    detail = f"{opened.workspace_mode} workspace, {opened.sandbox_backend}, {millis:.0f} ms"
    return Check("environment session", ok, detail)


async def search_round_trip(address: str, run_dir: Path, settings: EtudeSettings) -> Check:
    """codebase_search in an environment session finds a function written a moment ago:
    base index, the session's fork of it, the edit sent by write_file, a hybrid query."""
    repo = run_dir / "tasks" / "smoke-repository"  # under the allowed repository roots
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "hello.py").write_text("print('hello')\n")
    env = GrpcEnvironment(address, settings.client)
    started = time.perf_counter()
    code = "def greet_visitor(name):\n    return f'Welcome, {name}!'\n"
    try:
        opened = await env.create_session("smoke", str(repo))
        calls = [
            ToolCall("write_file", {"path": "greeting.py", "content": code}, "call_0"),
            ToolCall("codebase_search", {"query": "welcome a visitor by name"}, "call_1"),
        ]
        results = await env.execute(opened.session_id, calls, parallel=False)
        await env.close_session(opened.session_id)
    finally:
        await env.close()
    found = results[1].result.output
    ok = results[1].result.exit_code == 0 and found.startswith("greeting.py:1-2")
    millis = (time.perf_counter() - started) * 1000
    detail = f"{millis:.0f} ms" if ok else found[:200]
    return Check("codebase_search after an edit", ok, detail)


async def reward_round_trip(address: str, settings: EtudeSettings) -> Check:
    """Grade the first bundled task with its gold patch: a real sandboxed test run."""
    task = next(read_jsonl(TASKS_FILE))
    started = time.perf_counter()
    async with open_channel(address, settings.client, auth=settings.auth) as channel:
        reply = await reward_pb2_grpc.RewardServiceStub(channel).Score(
            reward_pb2.ScoreRequest(
                task_id=common_pb2.TaskId(value=task.id), patch=task.gold_patch
            ),
            timeout=settings.client.timeout_seconds * 4,
        )
    millis = (time.perf_counter() - started) * 1000
    detail = f"{task.id}: reward {reply.reward:g}, {millis:.0f} ms {reply.error}".strip()
    return Check("reward of a gold patch", reply.reward == 1.0, detail)


SMOKE_PROMPT = "def add(a, b):\n"


async def inference_round_trip(address: str, settings: EtudeSettings) -> Check:
    """Greedy tokens streamed over gRPC, each with a logprob and the policy version."""
    request = inference_pb2.GenerateRequest(
        request_id=new_id("smoke"),
        prompt_text=SMOKE_PROMPT,
        sampling=inference_pb2.SamplingParams(temperature=0, max_tokens=16),
    )
    started = time.perf_counter()
    first_token = None
    tokens, logprobs, versions = [], [], []
    async with open_channel(address, settings.client, auth=settings.auth) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        async for chunk in stub.Generate(request, timeout=settings.client.timeout_seconds * 4):
            first_token = first_token or time.perf_counter()
            tokens += chunk.token_ids
            logprobs += chunk.logprobs
            versions += chunk.policy_versions
    ok = 0 < len(tokens) == len(logprobs) == len(versions) and all(lp <= 0 for lp in logprobs)
    seconds = time.perf_counter() - started
    first_ms = ((first_token or started) - started) * 1000
    detail = f"{len(tokens)} tokens, first after {first_ms:.0f} ms, {seconds * 1000:.0f} ms in all"
    return Check("inference Generate (gRPC)", ok, detail)


async def openai_completion(http_url: str, settings: EtudeSettings) -> Check:
    body = json.dumps({"prompt": SMOKE_PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 0})
    request = urllib.request.Request(
        f"{http_url}/v1/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", **bearer_header(settings.auth, "operator")},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.loads(response.read())
    choice = reply["choices"][0]
    ok = reply["usage"]["completion_tokens"] == len(choice["logprobs"]["token_logprobs"]) > 0
    millis = (time.perf_counter() - started) * 1000
    return Check("inference /v1/completions (HTTP)", ok, f"{millis:.0f} ms, {choice['text']!r}")


def _check(name: str, coroutine) -> Check:
    try:
        return asyncio.run(coroutine)
    except Exception as error:  # a failed check is reported, not raised
        return Check(name, False, repr(error))


def run_smoke(settings: EtudeSettings, status: StackStatus, console: Console) -> bool:
    checks = component_checks(status)
    checks.append(_check("queue put → get → ack", queue_round_trip(status.redis_url, settings)))
    environment = next((c for c in status.components if c.name == "environment"), None)
    if environment is not None:
        run_dir = Path(status.run_dir)
        round_trip = environment_round_trip(environment.address, run_dir, settings)
        checks.append(_check("environment session", round_trip))
        if any(c.name == "search" for c in status.components):
            searched = search_round_trip(environment.address, run_dir, settings)
            checks.append(_check("codebase_search after an edit", searched))
    reward = next((c for c in status.components if c.name == "reward"), None)
    if reward is not None:
        checks.append(_check("reward of a gold patch", reward_round_trip(reward.address, settings)))
    inference = next((c for c in status.components if c.name == "inference"), None)
    if inference is not None:
        generated = inference_round_trip(inference.address, settings)
        checks.append(_check("inference Generate (gRPC)", generated))
        if inference.http_url:
            completed = openai_completion(inference.http_url, settings)
            checks.append(_check("inference /v1/completions (HTTP)", completed))
    table = Table(title="Smoke check")
    for column in ("check", "result", "detail"):
        table.add_column(column)
    for check in checks:
        result = "[green]ok[/]" if check.ok else "[red]FAILED[/]"
        table.add_row(check.name, result, check.detail)
    Console().print(table)
    passed = all(c.ok for c in checks)
    console.print("[green]Smoke check passed.[/]" if passed else "[red]Smoke check failed.[/]")
    return passed
