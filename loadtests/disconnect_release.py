"""How fast the inference service gives back what an abandoned HTTP request held.

- Service: `python -m etude.inference` as its own process, the torch engine on the `tiny`
  preset (fresh weights, seed 0) with 32 sequence slots, its OpenAI-compatible HTTP API on
  loopback.
- Abandoned requests, each sent over a raw socket by a client that reads nothing of the
  answer: a non-streamed `/v1/completions` with n=32 and 3,000 tokens; a streamed one of 64
  prompts × n=4 (256 sequences for 32 slots: most wait in the engine's queue); a
  non-streamed chat with n=16; a streamed chat with n=4. Once GetLoad reports the request
  running and it has generated for 0.5 s, the client closes its socket.
- `release_s_<case>`: seconds from that close until GetLoad reports no sequence running or
  waiting and no cache slot in use (the worst of the repeats); a request whose slots stay
  busy for `--release-timeout` seconds (30) is reported at that value and listed under
  `not_released` in the JSON.
- `control_http_s`, `control_grpc_s`: right after each release, a 4-token completion over
  HTTP and a 4-token gRPC `Generate`, timed end to end (the worst of all); each must come back
  with exactly 4 tokens, or the benchmark fails.

Quick: the first two cases once; full: all four, three times each. Any other load on the
machine shows in these figures.

    python loadtests/disconnect_release.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from benchlib import argument_parser, metric, print_metrics, start_service, write_json

from etude.common.auth import bearer_header
from etude.common.net import free_port
from etude.common.processes import terminate
from etude.common.settings import get_settings
from etude.inference.client import GrpcInference
from etude.inference.types import EngineLoad, GenerationRequest, SamplingParams

SLOTS = 32
SETTLE_TIMEOUT = 900.0
LONG = {"max_tokens": 3000, "temperature": 1.0}
CHAT = [{"role": "user", "content": "Write a parser."}]
CASES = {
    "completion_n32": ("/v1/completions", {"prompt": "def f(x):", "n": 32, **LONG}),
    "streamed_64_prompts_n4": (
        "/v1/completions",
        {"prompt": [f"# file {i}\n" for i in range(64)], "n": 4, "stream": True, **LONG},
    ),
    "chat_n16": ("/v1/chat/completions", {"messages": CHAT, "n": 16, **LONG}),
    "streamed_chat_n4": ("/v1/chat/completions",
                         {"messages": CHAT, "n": 4, "stream": True, **LONG}),
}  # fmt: skip
QUICK_CASES = ("completion_n32", "streamed_64_prompts_n4")


def abandon(url: str, path: str, body: dict, token_header: dict[str, str]) -> socket.socket:
    """Send the request and read nothing of the answer; closing the socket leaves."""
    address = urlsplit(url)
    payload = json.dumps(body).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: {address.netloc}", "Content-Type: application/json",
            f"Content-Length: {len(payload)}"]  # fmt: skip
    head += [f"{name}: {value}" for name, value in token_header.items()]
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    return sock


def idle(load: EngineLoad) -> bool:
    return load.running == 0 and load.waiting == 0 and load.kv_cache_usage == 0


async def until(client: GrpcInference, ready, timeout: float) -> float | None:
    """Seconds until GetLoad satisfies `ready`; None after `timeout`."""
    started = time.perf_counter()
    while not ready(await client.get_load()):
        if time.perf_counter() - started > timeout:
            return None
        await asyncio.sleep(0.01)
    return time.perf_counter() - started


async def control_http(http: httpx.AsyncClient) -> float:
    started = time.perf_counter()
    reply = await http.post(
        "/v1/completions", json={"prompt": "def add(a, b):", "max_tokens": 4, "temperature": 0}
    )
    seconds = time.perf_counter() - started
    usage = reply.json().get("usage", {}) if reply.is_success else {}
    if usage.get("completion_tokens") != 4:
        raise RuntimeError(f"the HTTP control request failed: {reply.status_code} {reply.text}")
    return seconds


async def control_grpc(client: GrpcInference, number: int) -> float:
    sampling = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    request = GenerationRequest(
        request_id=f"control-{number}", prompt_token_ids=(5, 6, 7), sampling=sampling
    )
    started = time.perf_counter()
    tokens = [t async for delta in client.generate(request) for t in delta.token_ids]
    seconds = time.perf_counter() - started
    if len(tokens) != 4:
        raise RuntimeError(f"the gRPC control Generate returned {len(tokens)} tokens, not 4")
    return seconds


async def measure(url: str, address: str, cases, repeats: int, release_timeout: float):
    token = bearer_header(get_settings().auth, "rollout")
    client = GrpcInference(address)
    releases: dict[str, float] = {}
    controls: dict[str, list[float]] = {"http": [], "grpc": []}
    not_released: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=url, headers=token, timeout=600) as http:
            await control_http(http)  # warm-up
            for case in cases:
                path, body = CASES[case]
                for repeat in range(repeats):
                    # Idle first: what an earlier case left running, if its slots were
                    # never released, runs out its 3,000 tokens.
                    if await until(client, idle, SETTLE_TIMEOUT) is None:
                        raise RuntimeError(f"{case}: the engine is still busy before it starts")
                    sock = abandon(url, path, body, token)
                    if await until(client, lambda load: load.running > 0, 60) is None:
                        raise RuntimeError(f"{case}: the request never started generating")
                    await asyncio.sleep(0.5)
                    sock.close()
                    seconds = await until(client, idle, release_timeout)
                    if seconds is None:
                        not_released.append(f"{case}#{repeat}")
                        seconds = release_timeout
                    releases[case] = max(releases.get(case, 0.0), seconds)
                    controls["http"].append(await control_http(http))
                    controls["grpc"].append(await control_grpc(client, len(controls["grpc"])))
    finally:
        await client.close()
    return releases, controls, not_released


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--release-timeout", type=float, default=30.0, metavar="SECONDS")
    args = parser.parse_args()
    cases = QUICK_CASES if args.quick else tuple(CASES)
    repeats = 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as scratch:
        http_port = free_port()
        process, address = start_service(
            "etude.inference",
            Path(scratch),
            ETUDE_INFERENCE__BACKEND="torch",
            ETUDE_INFERENCE__MODEL="tiny",
            ETUDE_INFERENCE__MAX_NUM_SEQS=str(SLOTS),
            ETUDE_INFERENCE__HTTP_PORT=str(http_port),
        )
        try:
            releases, controls, not_released = asyncio.run(
                measure(f"http://127.0.0.1:{http_port}", address, cases, repeats,
                        args.release_timeout)
            )  # fmt: skip
        finally:
            terminate(process, timeout=20)
    metrics = {
        f"release_s_{case}": metric(seconds, "s", target=1.0) for case, seconds in releases.items()
    }
    metrics["control_http_s"] = metric(max(controls["http"]), "s", target=2.0)
    metrics["control_grpc_s"] = metric(max(controls["grpc"]), "s", target=2.0)
    print_metrics("slots released after a client disconnects (torch engine, tiny)", metrics)
    if not_released:
        print(f"not released within {args.release_timeout:g} s: {', '.join(not_released)}")
    write_json(args.json, "disconnect_release", metrics, quick=args.quick, cores=os.cpu_count(),
               not_released=not_released)  # fmt: skip


if __name__ == "__main__":
    main()
