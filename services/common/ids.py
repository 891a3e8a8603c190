"""Ids: short, unique, and sortable by creation time, so logs and Redis keys read in order."""

from __future__ import annotations

import secrets
import time


def new_id(prefix: str) -> str:
    """`<prefix>-<12 hex digits of milliseconds><10 random hex digits>`, e.g. `ro-0193a4...`."""
    if not prefix.isidentifier():
        raise ValueError(f"id prefix must be an identifier, got {prefix!r}")
    return f"{prefix}-{time.time_ns() // 1_000_000:012x}{secrets.token_hex(5)}"
