"""Reading a generation stream back into whole completions (every backend and client)."""

from __future__ import annotations


async def run_request(source, request) -> dict[int, dict]:
    """Each completion of `request` from `source.generate`: tokens, logprobs, versions,
    text and finish reason, keyed by completion index."""
    out: dict[int, dict] = {}
    async for delta in source.generate(request):
        c = out.setdefault(
            delta.index, {"tokens": [], "logprobs": [], "versions": [], "text": "", "reason": None}
        )
        c["tokens"] += delta.token_ids
        c["logprobs"] += delta.logprobs
        c["versions"] += delta.policy_versions
        c["text"] += delta.text
        c["reason"] = delta.finish_reason or c["reason"]
    return out
