"""`/v1/completions` and `/v1/chat/completions` as OpenAI clients use them, on the torch
backend over a real uvicorn server: top-N logprobs, echo, penalties, logit bias, lists of
prompts, usage in streams; chat plain and streamed, its prompt the rollout's format."""

from __future__ import annotations

import json

import pytest
import torch

from etude.inference.chat_format import IM_END, IM_START


async def post(http, path: str, body: dict) -> dict:
    reply = await http.post(path, json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def events(http, path: str, body: dict) -> list[dict]:
    async with http.stream("POST", path, json={**body, "stream": True}) as reply:
        assert reply.status_code == 200
        lines = [line async for line in reply.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def raw_logprobs(model, tokens: list[int]) -> torch.Tensor:
    """Each position's next-token logprobs, from the model itself."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float().log_softmax(-1)


async def test_top_logprobs_are_the_model_s_likeliest_tokens(http, tokenizer, model):
    body = {"prompt": "def f(x):", "max_tokens": 4, "temperature": 0, "logprobs": 3}
    choice = (await post(http, "/v1/completions", body))["choices"][0]
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == 4 and "".join(logprobs["tokens"]) == choice["text"]
    prompt = tokenizer.encode("def f(x):")
    first = raw_logprobs(model, prompt)[-1]
    expected = {tokenizer.decode([int(t)]) for t in first.topk(3).indices}
    assert expected <= set(logprobs["top_logprobs"][0])
    for sampled, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True):
        # Greedy: the sampled token is the likeliest, and its logprob the model's own.
        assert sampled == pytest.approx(max(top.values()), abs=1e-4)
    assert logprobs["token_logprobs"][0] == pytest.approx(float(first.max()), abs=1e-3)
    offsets = logprobs["text_offset"]
    assert offsets[0] == 0 and offsets[1] == len(logprobs["tokens"][0])


async def test_echo_returns_the_prompt_and_its_logprobs(http, tokenizer, model):
    text = "import os\nprint(os.getcwd())"
    prompt = tokenizer.encode(text)
    body = {"prompt": text, "max_tokens": 2, "temperature": 0, "echo": True, "logprobs": 1}
    choice = (await post(http, "/v1/completions", body))["choices"][0]
    assert choice["text"].startswith(text) and len(choice["text"]) > len(text)
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(prompt) + 2
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    expected = raw_logprobs(model, prompt)
    for position in range(1, len(prompt)):
        wanted = float(expected[position - 1, prompt[position]])
        assert logprobs["token_logprobs"][position] == pytest.approx(wanted, abs=1e-3)
    plain = {**body, "echo": False, "logprobs": None}
    generated = (await post(http, "/v1/completions", plain))["choices"][0]["text"]
    assert choice["text"] == text + generated


async def test_logit_bias_and_penalties_shape_what_is_sampled(http, tokenizer):
    forced = tokenizer.encode(" banana")[0]
    body = {"prompt": "x = ", "max_tokens": 6, "temperature": 0, "logprobs": 0}
    biased = {**body, "logit_bias": {str(forced): 100}}
    reply = (await post(http, "/v1/completions", biased))["choices"][0]
    assert reply["text"] == tokenizer.decode([forced] * 6)
    # The logprobs stay the model's own: a bias changes what is drawn, not its probability.
    assert all(lp < -1 for lp in reply["logprobs"]["token_logprobs"])
    # A mild bias repeats the token; penalties on repeats stop it.
    mild = {**body, "logit_bias": {str(forced): 8}}
    assert (await post(http, "/v1/completions", mild))["choices"][0]["text"] == tokenizer.decode(
        [forced] * 6
    )
    for penalty in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0},
                    {"repetition_penalty": 50.0}):  # fmt: skip
        text = (await post(http, "/v1/completions", {**mild, **penalty}))["choices"][0]["text"]
        assert text.count("banana") < 6, penalty


async def test_a_list_of_prompts_answers_each_in_order(http, tokenizer):
    prompts = ["def add(a, b):", "class Stack:"]
    body = {"max_tokens": 3, "temperature": 0, "n": 2}
    reply = await post(http, "/v1/completions", {**body, "prompt": prompts})
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3]
    for i, prompt in enumerate(prompts):
        alone = (await post(http, "/v1/completions", {**body, "prompt": prompt}))["choices"]
        assert [c["text"] for c in reply["choices"][2 * i : 2 * i + 2]] == [
            c["text"] for c in alone
        ]
    assert reply["usage"]["prompt_tokens"] == sum(len(tokenizer.encode(p)) for p in prompts)
    as_ids = [tokenizer.encode(p) for p in prompts]
    by_ids = await post(http, "/v1/completions", {**body, "prompt": as_ids})
    assert [c["text"] for c in by_ids["choices"]] == [c["text"] for c in reply["choices"]]


async def test_a_stream_ends_with_usage_when_asked(http):
    body = {"prompt": ["a", "b"], "max_tokens": 3, "temperature": 0,
            "stream_options": {"include_usage": True}}  # fmt: skip
    chunks = await events(http, "/v1/completions", body)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    texts = {0: "", 1: ""}
    for chunk in chunks[:-1]:
        for choice in chunk["choices"]:
            texts[choice["index"]] += choice["text"]
    plain = await post(http, "/v1/completions", {**body, "stream_options": None})
    assert [texts[0], texts[1]] == [c["text"] for c in plain["choices"]]


async def test_chat_renders_the_policy_s_format_and_streams_the_same_answer(http, tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "logprobs": True,
            "top_logprobs": 2}  # fmt: skip
    reply = await post(http, "/v1/chat/completions", body)
    rendered = f"{IM_START}system\nBe brief.{IM_END}\n{IM_START}user\nHi{IM_END}\n"
    rendered += f"{IM_START}assistant\n"
    assert reply["usage"]["prompt_tokens"] == len(tokenizer.encode(rendered))
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in {"stop", "length"}
    assert IM_END not in choice["message"]["content"]
    assert len(choice["logprobs"]["content"]) == reply["usage"]["completion_tokens"]
    assert all(len(e["top_logprobs"]) == 2 for e in choice["logprobs"]["content"])
    chunks = await events(http, "/v1/chat/completions", body)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert streamed == choice["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        (
            {"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
            "messages.0.tool_call_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages.0.content",
        ),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": ["path"]},
                        },
                    }
                ]
            },
            "tools.0.function.parameters",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {
                                "type": "object",
                                "properties": {"p": {}},
                                "required": "p",
                            },
                        },
                    }
                ]
            },
            "tools.0.function.parameters",
        ),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"store": True}, "store"),
        ({"service_tier": "flex"}, "service_tier"),
        ({"functions": [{"name": "f"}]}, "functions"),
    ],
)
async def test_chat_requests_it_cannot_honour_get_400_naming_the_field(http, body, param):
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **body}
    reply = await http.post("/v1/chat/completions", json=request)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    assert (await http.get("/health")).json()["status"] == "ok"


async def test_a_field_sent_as_null_takes_its_default(http):
    """As in OpenAI's API: clients that build requests from keyword arguments send nulls."""
    nulls = dict.fromkeys([
        "temperature", "top_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty",
        "logit_bias", "stream", "stream_options",
    ])  # fmt: skip
    chat = await http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logprobs": None,
              "tools": None, "tool_choice": None, **nulls},
    )  # fmt: skip
    assert chat.status_code == 200, chat.text
    [choice] = chat.json()["choices"]
    assert choice["logprobs"] is None and chat.json()["usage"]["completion_tokens"] <= 3
    completion = await http.post(
        "/v1/completions",
        json={"prompt": "def", "max_tokens": None, "echo": None, "logprobs": None, **nulls},
    )
    assert completion.status_code == 200, completion.text
    [choice] = completion.json()["choices"]
    assert completion.json()["usage"]["completion_tokens"] <= 16  # OpenAI's default
    assert choice["logprobs"] is None and not choice["text"].startswith("def")
    missing = await http.post("/v1/completions", json={"prompt": None})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "prompt"


async def test_what_clients_send_about_a_request_is_accepted_and_changes_nothing(http):
    """The Agents SDK and LiteLLM pass these through; the answer is the one without them."""
    request = {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0,
    }  # fmt: skip
    about = {
        "metadata": {"experiment": "a"}, "store": False, "service_tier": "auto",
        "prompt_cache_key": "k", "safety_identifier": "s", "user": "u",
    }  # fmt: skip
    plain = await http.post("/v1/chat/completions", json=request)
    with_about = await http.post("/v1/chat/completions", json={**request, **about})
    assert plain.status_code == with_about.status_code == 200, with_about.text
    assert with_about.json()["choices"] == plain.json()["choices"]
