"""The official `openai` client against the local stack (redis-server, the inference service
on a policy checkpoint, the environment service, all as processes on loopback): a chat with
the environment's tools returns `tool_calls` that the environment runs, the results go back
as `tool` messages and the conversation continues; streaming chat; completions with
logprobs and a list of prompts; errors as the client's exceptions.

The policy is a small model taught, before the stack starts, to answer the first turn of
this conversation with a tool call (a randomly initialised policy writes no calls): what is
tested is the path from the client to the environment and back, not the policy's skill."""

from __future__ import annotations

import dataclasses
import json
import sys

import httpx
import openai
import pytest
import torch

from etude.cli.stack import LocalStack, ServiceSpec
from etude.common.auth import bearer_header
from etude.common.settings import ClientSettings, EtudeSettings, StackSettings, get_settings
from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.client import GrpcEnvironment
from etude.environment.tools import tool_catalog
from etude.inference.chat_format import IM_END, ChatFormat
from etude.inference.openai_protocol import Message, Tool
from etude.model.checkpoint import build_model, save_checkpoint
from etude.model.tokenizer import load_tokenizer
from tests.conftest import skip_without_sandboxes
from tests.inference.conftest import small_moe_config

pytestmark = pytest.mark.integration

USER = "What does hello.py print?"
FIRST_TURN = "I will read it.\n" + render_tool_calls([ToolCall("read_file", {"path": "hello.py"})])


def openai_tools() -> list[dict]:
    """The environment's read_file and list_dir, as an OpenAI client declares tools."""
    tools = []
    for tool in tool_catalog().tools:
        if tool.name in ("read_file", "list_dir"):
            properties = {p: {"type": "string"} for p in (*tool.required, *tool.optional)}
            tools.append({"type": "function", "function": {
                "name": tool.name, "description": tool.description,
                "parameters": {"type": "object", "properties": properties,
                               "required": list(tool.required)},
            }})  # fmt: skip
    return tools


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> str:
    """A checkpoint whose greedy answer to the conversation's first turn is FIRST_TURN."""
    tokenizer = load_tokenizer()
    config = dataclasses.replace(small_moe_config(len(tokenizer)), max_position_embeddings=2048)
    threads = torch.get_num_threads()
    model = build_model(config, seed=0).train()
    chat = ChatFormat([Tool.model_validate(t) for t in openai_tools()])
    prompt = tokenizer.encode(chat.prompt([Message(role="user", content=USER)]))
    target = tokenizer.encode(FIRST_TURN + IM_END)
    tokens = torch.tensor([prompt + target])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        logits = model(tokens).logits[0, len(prompt) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits.float(), tokens[0, len(prompt) :])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 1e-3:
            break
    torch.set_num_threads(threads)
    directory = tmp_path_factory.mktemp("policy") / "tool-caller"
    save_checkpoint(model.eval(), directory, tokenizer)
    return str(directory)


@pytest.fixture(scope="module")
def stack(policy, tmp_path_factory):
    settings = EtudeSettings(
        stack=StackSettings(run_dir=tmp_path_factory.mktemp("stack"), ready_timeout_seconds=120)
    )
    inference = ServiceSpec(
        "inference", (sys.executable, "-m", "etude.inference"), http=True,
        env=(("ETUDE_INFERENCE__MODEL", policy), ("ETUDE_INFERENCE__MAX_MODEL_LEN", "2048")),
    )  # fmt: skip
    local = LocalStack(settings, (inference, ServiceSpec.module("environment")))
    local.start()
    yield local
    local.stop()


@pytest.fixture
async def client(stack):
    services = {c.name: c for c in stack.state.components}
    token = bearer_header(get_settings().auth, "rollout").get("Authorization", "Bearer none")
    async with openai.AsyncOpenAI(
        base_url=f"{services['inference'].http_url}/v1", api_key=token.removeprefix("Bearer "),
        max_retries=0,
    ) as client:  # fmt: skip
        yield client


@pytest.fixture
async def environment(stack):
    [service] = [c for c in stack.state.components if c.name == "environment"]
    client = GrpcEnvironment(service.address, ClientSettings(timeout_seconds=60))
    yield client
    await client.close()


async def test_a_chat_calls_the_environment_s_tools_and_continues(client, environment, stack):
    repository = stack.run_dir / "tasks" / "hello"  # where the environment opens sessions
    repository.mkdir(parents=True)
    (repository / "hello.py").write_text("print('hello from the sandbox')\n")
    assert (await environment.list_tools()) == tool_catalog()  # the tools the policy knows
    [model] = [m.id async for m in client.models.list()]
    messages: list[dict] = [{"role": "user", "content": USER}]
    first = await client.chat.completions.create(
        model=model, messages=messages, tools=openai_tools(), temperature=0, max_tokens=80
    )
    [choice] = first.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content == "I will read it."
    [call] = choice.message.tool_calls
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"path": "hello.py"}

    # The environment runs the call in a sandbox over the repository.
    with skip_without_sandboxes():
        session = (await environment.create_session("chat", str(repository))).session_id
    try:
        [executed] = await environment.execute(
            session, [ToolCall(call.function.name, json.loads(call.function.arguments), call.id)]
        )
    finally:
        await environment.close_session(session)
    assert "hello from the sandbox" in executed.result.output

    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": executed.result.output},
    ]
    second = await client.chat.completions.create(
        model=model, messages=messages, tools=openai_tools(), temperature=0, max_tokens=8
    )
    assert second.choices[0].finish_reason in {"stop", "length", "tool_calls"}
    # The policy read the result in its own format, as a training episode would hand it back.
    rendered = ChatFormat([Tool.model_validate(t) for t in openai_tools()]).prompt(
        [Message.model_validate(m) for m in messages]
    )
    assert '<tool_result id="call_0" name="read_file"' in rendered
    root = str(client.base_url).removesuffix("/v1/")  # vLLM's /tokenize is beside /v1
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {client.api_key}"}) as http:
        tokens = (await http.post(f"{root}/tokenize", json={"prompt": rendered})).json()
    assert second.usage.prompt_tokens == tokens["count"] > first.usage.prompt_tokens


async def test_streamed_chat_gives_the_same_tool_calls(client):
    request = {"model": (await client.models.list()).data[0].id, "temperature": 0,
               "messages": [{"role": "user", "content": USER}], "tools": openai_tools(),
               "max_tokens": 80}  # fmt: skip
    whole = (await client.chat.completions.create(**request)).choices[0]
    content, calls, finish = "", {}, None
    stream = await client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    )
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                calls.setdefault(call.index, call)
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and content.strip() == whole.message.content
    assert [(c.function.name, c.function.arguments) for c in calls.values()] == [
        (c.function.name, c.function.arguments) for c in whole.message.tool_calls
    ]
    assert usage is not None and usage.completion_tokens > 0


async def test_completions_with_logprobs_and_a_list_of_prompts(client):
    model = (await client.models.list()).data[0].id
    reply = await client.completions.create(
        model=model, prompt=["def add(a, b):", "import os"], max_tokens=4, temperature=0,
        logprobs=2, n=2,
    )  # fmt: skip
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    for choice in reply.choices:
        assert len(choice.logprobs.tokens) == len(choice.logprobs.top_logprobs) > 0
        assert all(len(top) >= 1 for top in choice.logprobs.top_logprobs)
    assert reply.choices[0].text == reply.choices[1].text  # greedy, twice


async def test_errors_reach_the_client_as_its_exceptions(client):
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    assert unknown.value.code == "model_not_found"
    model = (await client.models.list()).data[0].id
    with pytest.raises(openai.BadRequestError) as refused:
        await client.completions.create(model=model, prompt="x", best_of=3)
    assert refused.value.param == "best_of"
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], temperature=-1
        )
    assert "temperature" in bad.value.message
    with pytest.raises(openai.BadRequestError) as orphan:
        await client.chat.completions.create(
            model=model, messages=[{"role": "tool", "tool_call_id": "x", "content": "out"}]
        )
    assert orphan.value.param == "messages.0.tool_call_id"
    alive = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert alive.choices[0].message.role == "assistant"
