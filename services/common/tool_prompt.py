"""How a tool is documented to the policy: its name, its parameters (the optional ones
marked) and its description. The rollout documents the environment's tools this way
(etude.rollout.prompt) and the inference service a chat client's `tools`
(etude.inference.chat_format): a policy reads one format in training and in serving."""

from __future__ import annotations

from collections.abc import Iterable


def describe_tool(
    name: str, required: Iterable[str], optional: Iterable[str], description: str
) -> str:
    parameters = ", ".join([*required, *(f"{p} (optional)" for p in optional)])
    return f"{name}({parameters})\n{description}"
