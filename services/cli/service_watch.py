"""When a running service of the local stack counts as unable to serve.

- It ended: at once, with how (the stack reaps it).
- It says so: health `NOT_SERVING` (an inference service whose engine died) in
  `NOT_SERVING_CHECKS` checks in a row, about a second apart.
- It answers nothing while its process lives: only after `SILENT_SECONDS`. On two busy
  cores a service's event loop can be slow to answer for a while (a long tokenization, a
  collection), and a busy service is not a dead one.
"""

from __future__ import annotations

import time
from collections import Counter

NOT_SERVING_CHECKS = 3
SILENT_SECONDS = 60.0


class ServiceWatch:
    def __init__(self) -> None:
        self._not_serving: Counter[str] = Counter()
        self._silent_since: dict[str, float] = {}

    def verdict(self, name: str, health: str) -> str | None:
        """Why `name` can no longer serve, given its latest health check; None if it may."""
        now = time.monotonic()
        if health == "SERVING":
            self._not_serving.pop(name, None)
            self._silent_since.pop(name, None)
            return None
        if health == "NOT_SERVING":
            self._silent_since.pop(name, None)
            self._not_serving[name] += 1
            if self._not_serving[name] >= NOT_SERVING_CHECKS:
                return "reports NOT_SERVING"
            return None
        self._not_serving.pop(name, None)
        since = self._silent_since.setdefault(name, now)
        if now - since >= SILENT_SECONDS:
            return f"has not answered its health check for {now - since:.0f} s ({health})"
        return None
