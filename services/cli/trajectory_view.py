"""How `etude runs trajectories` prints a trajectory: its verdict, each turn (the policy's
tool calls under what it wrote, the environment's answer), the diff it left."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax


def _cut(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit} more characters; --full shows them)"


def verdict(record: dict[str, Any]) -> str:
    tests = record["fail_to_pass"]
    passed = sum(tests.values())
    broken = len(record["pass_to_pass_broken"])
    parts = [
        f"reward {record['reward']:.3g}", f"finish {record['finish_reason'] or '—'}",
        f"{record['turns']} turns", f"FAIL_TO_PASS {passed}/{len(tests)}",
        f"PASS_TO_PASS broken {broken}/{record['pass_to_pass_count']}",
    ]  # fmt: skip
    if record["grading_error"]:
        parts.append(f"not graded: {record['grading_error']}")
    return " · ".join(parts)


def print_trajectory(console: Console, record: dict[str, Any], limit: int) -> None:
    first, last = record["policy_versions"]
    title = (f"step {record['step']} · {record['task_id']} · sample {record['sample_index']} "
             f"· policy v{first}–v{last}")  # fmt: skip
    console.rule(escape(title))
    console.print(escape(verdict(record)), highlight=False, soft_wrap=True)
    parts = ", ".join(f"{k} {v:.3g}" for k, v in sorted(record["reward_components"].items()))
    console.print(f"[dim]reward parts: {escape(parts)}[/]", highlight=False, soft_wrap=True)
    for message in record["messages"]:
        role = message["role"]
        if role == "prompt":
            continue  # the task's instruction and the tools: the same in every sample
        if role == "environment":
            console.print(Panel(escape(_cut(message["text"], limit)), title="environment",
                                border_style="dim"))  # fmt: skip
            continue
        calls = "\n".join(
            f"→ {c['name']}({', '.join(f'{k}={v!r}' for k, v in c['arguments'].items())})"
            for c in message["tool_calls"]
        )
        errors = "\n".join(f"✗ {e}" for e in message["parse_errors"])
        body = "\n".join(p for p in (_cut(message["text"], limit), calls, errors) if p)
        console.print(Panel(escape(body), title=f"policy ({len(message['tool_calls'])} calls)",
                            border_style="cyan"))  # fmt: skip
    if record["diff"]:
        console.print(Syntax(_cut(record["diff"], limit), "diff", word_wrap=True))
    else:
        console.print("[dim]no change to the repository[/]")
