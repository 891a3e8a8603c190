"""Strict JSON request bodies for the HTTP services (the gateway, the inference API).

Python's json module reads `NaN`, `Infinity` and `-Infinity`, and `1e999` as infinity; a
non-finite number then fails deep inside (a 500 when the answer is encoded) or, worse, is
accepted and poisons a run. It also reads `"\\ud800"`, a lone surrogate: a string UTF-8
cannot carry, which fails wherever the text is tokenized or stored. `StrictJSONRoute`
parses every request body first with those refused, anywhere in the document, and raises
a validation error naming the problem.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

# A JSON escape of a UTF-16 surrogate (`\\ud83d`, half of an escaped emoji, or a lone one).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _Refused(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number this API accepts (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{text[:40]} is too large for a finite number")
    return value


def _check_strings(node: Any) -> None:
    """Refuse strings JSON can spell but UTF-8 cannot carry (lone surrogates, `\\ud800`):
    they fail later, where the text is tokenized or written to Redis or YAML."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_strict_json(body: bytes) -> Any:
    """The document, or ValueError when it is not JSON with finite numbers and valid text."""
    try:
        document = json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
        if _SURROGATE_ESCAPE.search(body):  # the only way one gets in: read the strings then
            _check_strings(document)
    except UnicodeError as error:
        raise ValueError(f"the body is not valid UTF-8 text: {error}") from None
    except RecursionError:
        raise ValueError("the document is nested too deeply") from None
    except _Refused as error:
        raise ValueError(str(error)) from None
    except ValueError as error:  # JSONDecodeError, or an integer of over 4300 digits
        raise ValueError(f"the body is not valid JSON: {error}") from None
    return document


class StrictJSONRoute(APIRoute):
    """An APIRoute that refuses a JSON body with non-finite numbers or text UTF-8 cannot
    carry (a RequestValidationError: FastAPI's 422, or the app's own answer to it) before
    FastAPI's own, permissive parse reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            body = await request.body()  # cached on the request: the handler reads it again
            if body and "json" in request.headers.get("content-type", "json"):
                try:
                    # Kept as the document `request.json()` returns, which FastAPI reads:
                    # parsing holds the event loop (a body of many small objects, ~0.1 s a
                    # MB), so a body is parsed once, not twice.
                    request._json = parse_strict_json(body)
                except ValueError as error:
                    raise RequestValidationError(
                        [{"type": "json_invalid", "loc": ("body",), "msg": str(error)}]
                    ) from None
            return await handler(request)

        return strict_handler
