"""A caller of the HTTP APIs makes the server pay for nothing it may not have.

The gateway and the inference service run as processes (`python -m etude.<service>`, the
way `etude up` starts them: the torch engine on the `tiny` preset), attacked through their
public HTTP APIs: raw sockets where a request must be abandoned or a body streamed half-way,
the official `openai` client where it is a client's call. Each attack must fail fast — a
refusal from the headers alone, before the body is read; a too-large request refused before
it is tokenized; an abandoned generation's slots freed at once — and the service must answer
a normal request right after.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from etude.cli.stack import Component, LocalStack, ServiceSpec
from etude.common.auth import read_tokens
from etude.common.settings import EtudeSettings, StackSettings, get_settings
from etude.inference.client import GrpcInference
from etude.inference.types import EngineLoad, GenerationRequest, SamplingParams

pytestmark = pytest.mark.integration

T = TypeVar("T")

TOKENS = read_tokens(get_settings().auth.tokens_dir)
HUGE = 200 * 1024 * 1024  # what the red team sent unauthenticated
RUN_BODY_CAP = 4 * 1024 * 1024  # the gateway's POST /runs cap in this stack (default 256 MiB)
GENERATION_BODY_CAP = 16 * 1024 * 1024  # the inference API's default
# Bytes a client gets onto the wire before a refusal from the headers reaches it: what the
# loopback's socket buffers take (a few MiB each way), never the body.
SOCKET_SLACK = 24 * 1024 * 1024
SLOTS = 32


@dataclass(frozen=True, slots=True)
class Stack:
    inference: Component
    gateway: Component


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ETUDE_INFERENCE__MAX_NUM_SEQS", str(SLOTS))
        env.setenv("ETUDE_GATEWAY__LAUNCHER", "none")
        env.setenv("ETUDE_GATEWAY__MAX_RUN_BODY_BYTES", str(RUN_BODY_CAP))
        run_dir = tmp_path_factory.mktemp("stack")
        settings = EtudeSettings(stack=StackSettings(run_dir=run_dir, ready_timeout_seconds=120))
        gateway = ServiceSpec("gateway", (sys.executable, "-m", "etude.gateway"), http=True)
        local = LocalStack(settings, (ServiceSpec.module("inference"), gateway))
        state = local.start()
        try:
            by_name = {c.name: c for c in state.components}
            yield Stack(by_name["inference"], by_name["gateway"])
        finally:
            local.stop()


# -- raw HTTP --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: dict
    sent: int
    """Body bytes the client got onto the wire before the answer came."""
    seconds: float
    """From the request's headers sent to the answer read."""


def send_body(
    url: str,
    path: str,
    headers: dict[str, str],
    *,
    size: int,
    declared: bool = True,
    stream: bool = True,
) -> Answer:
    """POST a body of `size` bytes (JSON-looking garbage), with its Content-Length or chunked
    (`declared` false), sending it as fast as the server takes it (`stream`) or not at all,
    while reading the answer. The body is made chunk by chunk, never held whole."""
    address = urlsplit(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    framing = {"Content-Length": str(size)} if declared else {"Transfer-Encoding": "chunked"}
    lines = [f"POST {path} HTTP/1.1", f"Host: {address.netloc}",
             "Content-Type: application/json"]  # fmt: skip
    lines += [f"{k}: {v}" for k, v in {**framing, **headers}.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    sent = 0

    def push() -> None:
        nonlocal sent
        chunk = b"[" + b"1," * (1 << 19)  # 1 MiB
        try:
            sock.sendall(head)
            while sent < size:
                part = chunk[: size - sent]
                sock.sendall(part if declared else b"%x\r\n%s\r\n" % (len(part), part))
                sent += len(part)
        except OSError:  # the server answered and closed: what this attack should get
            pass

    started = time.perf_counter()
    pusher = threading.Thread(target=push, daemon=True)
    if stream:  # the body right behind the headers, as most clients send it
        pusher.start()
    else:
        sock.sendall(head)
    try:
        status, answer_headers, body = _read_answer(sock)
    finally:
        seconds = time.perf_counter() - started
        sock.close()
        pusher.join(timeout=30) if stream else None
    return Answer(status, answer_headers, body, sent, seconds)


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers["content-length"])
    while len(rest) < length:
        rest += _recv(sock)
    return int(status_line.split()[1]), headers, json.loads(rest[:length])


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(1 << 16)
    if not data:
        raise ConnectionError("the server closed the connection without an answer")
    return data


def peak_rss_bytes(pid: int) -> int:
    """The most memory the process has held at once (its RSS high-water mark)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


def openai_client(stack: Stack, **options) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{stack.inference.http_url}/v1", api_key=TOKENS["rollout"], max_retries=0,
        **options,
    )  # fmt: skip


def assert_still_serving(stack: Stack) -> float:
    """A normal request to each service succeeds; returns the inference request's seconds."""
    started = time.perf_counter()
    reply = openai_client(stack).completions.create(
        model="tiny", prompt="def add(a, b):", max_tokens=4
    )
    seconds = time.perf_counter() - started
    assert reply.choices[0].finish_reason in {"length", "stop"} and reply.usage.completion_tokens
    runs = urllib.request.Request(f"{stack.gateway.http_url}/runs", headers=bearer("operator"))
    with urllib.request.urlopen(runs, timeout=10) as listed:
        assert listed.status == 200 and isinstance(json.loads(listed.read()), list)
    return seconds


# -- refused before the body is read -------------------------------------------------------

UNAUTHENTICATED = [
    ("inference", "/v1/chat/completions", {}),
    ("inference", "/v1/completions", {"Authorization": "Bearer forged"}),
    ("gateway", "/runs", {}),
]


@pytest.mark.parametrize(("service", "path", "headers"), UNAUTHENTICATED)
def test_an_unauthenticated_body_is_refused_before_a_byte_of_it_is_read(
    stack, service, path, headers
):
    component = getattr(stack, service)
    # The headers alone: the server answers without waiting for the 200 MB it was promised.
    answer = send_body(component.http_url, path, headers, size=HUGE, stream=False)
    assert answer.status == 401 and answer.sent == 0, answer
    assert answer.seconds < 2, answer
    if service == "inference":
        assert answer.body["error"]["type"] == "authentication_error", answer.body
    else:
        assert answer.body == {"detail": "a credential is required"}
        assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.headers["connection"] == "close"
    # Sent for real, as fast as the server takes it: the answer comes as fast, the server
    # stops reading, and its memory does not grow by the body.
    before = peak_rss_bytes(component.pid)
    answer = send_body(component.http_url, path, headers, size=HUGE)
    grown = peak_rss_bytes(component.pid) - before
    print(f"\n{service} {path}: 401 after {answer.seconds:.3f} s, {answer.sent:,} body bytes "
          f"sent, server peak RSS {grown / 2**20:+.1f} MiB")  # fmt: skip
    assert answer.status == 401, answer
    assert answer.seconds < 2 and answer.sent < SOCKET_SLACK, answer
    assert grown < 32 * 2**20
    assert_still_serving(stack)


def test_the_gateway_checks_the_token_before_it_parses_the_body(stack):
    """A malformed body without a token is a 401, not a 422 telling the caller what the API
    expects; with a token of another role, a 403."""
    for headers, status in (({}, 401), (bearer("rollout"), 403), (bearer("operator"), 422)):
        answer = send_body(stack.gateway.http_url, "/runs", headers, size=1000, stream=True)
        assert answer.status == status, (headers, answer)


@pytest.mark.parametrize(
    ("service", "path", "role", "cap"),
    [
        ("inference", "/v1/chat/completions", "rollout", GENERATION_BODY_CAP),
        ("gateway", "/runs", "operator", RUN_BODY_CAP),
    ],
)
def test_a_body_over_its_routes_cap_is_refused_as_soon_as_it_passes(
    stack, service, path, role, cap
):
    component = getattr(stack, service)
    declared = send_body(component.http_url, path, bearer(role), size=HUGE, stream=False)
    assert declared.status == 413 and declared.sent == 0, declared
    assert f"{cap:,} bytes" in json.dumps(declared.body), declared.body
    # Chunked, it declares no size: counted as it arrives, cut off once past the cap.
    before = peak_rss_bytes(component.pid)
    chunked = send_body(component.http_url, path, bearer(role), size=HUGE, declared=False)
    grown = peak_rss_bytes(component.pid) - before
    print(f"\n{service} {path} chunked: 413 after {chunked.seconds:.3f} s, {chunked.sent:,} "
          f"body bytes sent, server peak RSS {grown / 2**20:+.1f} MiB")  # fmt: skip
    assert chunked.status == 413, chunked
    assert cap < chunked.sent < cap + SOCKET_SLACK, chunked
    assert chunked.seconds < 5
    assert_still_serving(stack)


# -- refused before it is tokenized ----------------------------------------------------------


def tool(name: str, description: str = "", parameters: int = 1) -> dict:
    properties = {f"p{i}": {"type": "string"} for i in range(parameters)}
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties}}}  # fmt: skip


async def slowest_get_load(address: str, during: Callable[[], T]) -> tuple[float, T]:
    """Run `during` in a thread while asking GetLoad over and over; the slowest answer's
    seconds, and what `during` returned."""
    client = GrpcInference(address)
    done = asyncio.Event()
    slowest = 0.0

    async def poll() -> None:
        nonlocal slowest
        while not done.is_set():
            started = time.perf_counter()
            await client.get_load()
            slowest = max(slowest, time.perf_counter() - started)
            await asyncio.sleep(0.02)

    poller = asyncio.create_task(poll())
    try:
        outcome = await asyncio.to_thread(during)
    finally:
        done.set()
        await poller
        await client.close()
    return slowest, outcome


def post_json(url: str, path: str, body: bytes) -> tuple[int, dict, float]:
    """POST an already encoded body as the rollout role: status, answer, seconds."""
    started = time.perf_counter()
    reply = httpx.post(f"{url}{path}", content=body, headers={"Content-Type": "application/json",
                       **bearer("rollout")}, timeout=120)  # fmt: skip
    return reply.status_code, reply.json(), time.perf_counter() - started


@pytest.mark.parametrize(
    ("tools", "names", "stall"),
    [
        # 16 tools × 400 KB descriptions: under the body cap, far over what the context holds.
        ([tool(f"t{i}", "x" * 400_000) for i in range(16)], "131,072 bytes", 1.0),
        # 6 MB of 200,000 small objects: parsing the JSON is what holds the event loop
        # (~0.3 s on an idle 2-core machine), and nothing after it.
        ([tool("wide", parameters=200_000)], "at most 256", 3.0),
    ],
    ids=["huge-descriptions", "200k-parameters"],
)
async def test_a_chat_too_large_for_the_context_is_refused_before_it_is_tokenized(
    stack, tools, names, stall
):
    messages = [{"role": "user", "content": "hi"}]
    # Encoded up front: the server's time is measured, not the client's.
    body = json.dumps({"model": "tiny", "messages": messages, "tools": tools}).encode()
    attack = functools.partial(post_json, stack.inference.http_url, "/v1/chat/completions", body)
    slowest, (status, answer, seconds) = await slowest_get_load(stack.inference.address, attack)
    print(f"\n{len(body):,} bytes refused after {seconds:.3f} s; slowest GetLoad meanwhile "
          f"{slowest:.3f} s")  # fmt: skip
    assert status == 400 and names in answer["error"]["message"], answer
    assert answer["error"]["type"] == "invalid_request_error"
    assert seconds < 5 and slowest < stall
    # The official client reads it as its exception.
    with pytest.raises(openai.BadRequestError, match=names):
        openai_client(stack, timeout=60).chat.completions.create(
            model="tiny", messages=messages, tools=tools
        )
    assert_still_serving(stack)


async def test_a_legal_prompt_as_long_as_the_limit_allows_does_not_freeze_the_service(stack):
    """Text just under the byte limit is tokenized (off the event loop; then it is too long
    for the context): meanwhile gRPC GetLoad answers at once."""
    text = "    return value  # a comment\n" * (130_000 // 30)
    body = json.dumps({"model": "tiny", "prompt": [text] * 8, "max_tokens": 1}).encode()
    attack = functools.partial(post_json, stack.inference.http_url, "/v1/completions", body)
    slowest, (status, answer, seconds) = await slowest_get_load(stack.inference.address, attack)
    print(f"\n8 prompts of 130 KB tokenized and refused after {seconds:.3f} s; slowest "
          f"GetLoad meanwhile {slowest:.3f} s")  # fmt: skip
    assert status == 400 and "context" in answer["error"]["message"], answer
    assert slowest < 0.5


# -- abandoned generations -------------------------------------------------------------------


def abandon(url: str, path: str, body: dict) -> socket.socket:
    """Send a generation request and read nothing of its answer; close the socket to leave."""
    address = urlsplit(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json"
            f"\r\nAuthorization: Bearer {TOKENS['rollout']}\r\nContent-Length: {len(payload)}"
            "\r\n\r\n")  # fmt: skip
    sock.sendall(head.encode() + payload)
    return sock


async def wait_for(client: GrpcInference, ready: Callable[[EngineLoad], bool], timeout: float):
    """Seconds until GetLoad satisfies `ready`; fails after `timeout`."""
    started = time.perf_counter()
    while not ready(load := await client.get_load()):
        assert time.perf_counter() - started < timeout, load
        await asyncio.sleep(0.02)
    return time.perf_counter() - started


def idle(load: EngineLoad) -> bool:
    return load.running == 0 and load.waiting == 0 and load.kv_cache_usage == 0


LONG = {"max_tokens": 3000, "temperature": 1.0}
ABANDONED = {
    "completion-n32": ("/v1/completions", {"prompt": "def f(x):", "n": 32, **LONG}),
    "streamed-64-prompts-n4": (
        "/v1/completions",
        {"prompt": [f"# file {i}\n" for i in range(64)], "n": 4, "stream": True, **LONG},
    ),
    "chat-n16": ("/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "hi"}], "n": 16, **LONG}),
    "streamed-chat-n4": ("/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "hi"}], "n": 4,
                          "stream": True, **LONG}),
}  # fmt: skip


@pytest.mark.parametrize("case", ABANDONED)
async def test_an_abandoned_generation_frees_its_slots_at_once(stack, case):
    path, body = ABANDONED[case]
    client = GrpcInference(stack.inference.address)
    try:
        await wait_for(client, idle, timeout=30)
        sock = abandon(stack.inference.http_url, path, body)
        await wait_for(client, lambda load: load.running > 0, timeout=30)
        await asyncio.sleep(0.5)  # generating for a while
        sock.close()
        freed = await wait_for(client, idle, timeout=10)
        control = await asyncio.to_thread(assert_still_serving, stack)
    finally:
        await client.close()
    print(f"\n{case}: slots free {freed:.3f} s after the client left; control request "
          f"{control:.3f} s")  # fmt: skip
    assert freed < 1.5 and control < 2


async def test_a_cancelled_grpc_generate_frees_its_slots_running_or_waiting(stack):
    client = GrpcInference(stack.inference.address)
    try:
        await wait_for(client, idle, timeout=30)
        sampling = SamplingParams(max_tokens=3000, n=24, temperature=1.0)

        async def generate(request_id: str) -> None:
            request = GenerationRequest(
                request_id=request_id, prompt_token_ids=(5, 6, 7), sampling=sampling
            )
            async for _ in client.generate(request):
                pass

        calls = [asyncio.create_task(generate(name)) for name in ("running", "waiting")]
        await wait_for(client, lambda load: load.running == 1 and load.waiting == 1, timeout=30)
        await asyncio.sleep(0.5)
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        freed = await wait_for(client, idle, timeout=10)
    finally:
        await client.close()
    print(f"\ngRPC: slots free {freed:.3f} s after the calls were cancelled")
    assert freed < 1.5
