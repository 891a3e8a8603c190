"""Refuse an HTTP request before paying for it: `RequestGate`, a pure ASGI middleware the
gateway and the inference service's OpenAI-compatible API put in front of their apps.

Before the app sees a request, the gate

1. checks the credential in its headers on the paths that need one, and refuses (401/403)
   without reading a byte of the body: an unauthenticated 200 MB upload costs the server
   what its transport had buffered (~64 KiB), not 200 MB read and parsed;
2. caps the body by route: a `Content-Length` over the route's cap is a 413 at once, and a
   body sent without one (chunked) is counted as it arrives and refused with a 413 the
   moment it passes the cap, never buffered whole.

A refusal that leaves a body unread closes the connection (`Connection: close`), so the
server stops reading what the client still sends instead of discarding it for as long as
the client cares to send. Refusals are rendered by the app's own `respond`, so each API
keeps its error shape (the gateway's `{"detail"}`, OpenAI's `{"error"}`).

The routes' own authorization stays as a second line: the gate's `guarded` paths are
prefixes, and a route added elsewhere is still checked by its dependency.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from etude.common.auth import Verifier, bearer


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: an HTTP status and a message for the client."""

    status: int
    message: str


Authorize = Callable[[str | None], Refusal | None]
"""The `Authorization` header's value (None when absent) → a refusal, or None to let it in."""
Respond = Callable[[Refusal], Response]
"""A refusal as the app words its errors."""


def role_check(
    verifier: Verifier, roles: frozenset[str], *, unauthenticated: str, forbidden: str
) -> Authorize:
    """Lets in a bearer token of one of `roles`: 401 (`unauthenticated`) without a valid
    token, 403 (`forbidden`) for a token of another role."""

    def authorize(authorization: str | None) -> Refusal | None:
        code = verifier.check(bearer(authorization), roles)
        if code is None:
            return None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return Refusal(401, unauthenticated)
        return Refusal(403, forbidden)

    return authorize


class _TooLarge(Exception):
    """Raised into the app by `receive` once a body passes its cap (the 413 is sent)."""


class RequestGate:
    """The middleware: a credential checked from the headers on `guarded` paths, then the
    body capped at its route's limit (above)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        authorize: Authorize,
        guarded: Sequence[str],
        respond: Respond,
        max_body_bytes: int,
        body_limits: Mapping[str, int] | None = None,
    ) -> None:
        """`guarded`: path prefixes that need a credential (`/v1` covers `/v1/models`);
        `body_limits`: the cap of a path (exact, without a trailing slash) where it is not
        `max_body_bytes`."""
        self.app = app
        self.authorize = authorize
        self.guarded = tuple(prefix.rstrip("/") for prefix in guarded)
        self.respond = respond
        self.max_body_bytes = max_body_bytes
        self.body_limits = dict(body_limits or {})

    def limit_of(self, path: str) -> int:
        return self.body_limits.get(path.rstrip("/") or "/", self.max_body_bytes)

    def needs_credential(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.guarded)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path = scope["path"]
        if self.needs_credential(path):
            refusal = self.authorize(headers.get("authorization"))
            if refusal is not None:
                await self._refuse(refusal, headers, scope, receive, send)
                return
        limit = self.limit_of(path)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._refuse(self._too_large(limit), headers, scope, receive, send)
            return
        await self._counted(limit, headers, scope, receive, send)

    async def _counted(
        self, limit: int, headers: Headers, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """The app, with the body counted as it arrives (a chunked body declares no size)."""
        received = 0
        started = False
        refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if not started:
                        # Answered here rather than by the app: whatever the app makes of
                        # the error (FastAPI turns one while reading a body into a 400) is
                        # dropped by `tracking_send`.
                        refused = True
                        await self._refuse(self._too_large(limit), headers, scope, receive, send)
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        # Answered with a 413 (or, past a started response, cut off).
        with contextlib.suppress(_TooLarge):
            await self.app(scope, counting_receive, tracking_send)

    def _too_large(self, limit: int) -> Refusal:
        return Refusal(413, f"the request body is larger than this route takes ({limit:,} bytes)")

    async def _refuse(
        self, refusal: Refusal, headers: Headers, scope: Scope, receive: Receive, send: Send
    ) -> None:
        response = self.respond(refusal)
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            # A body is (still) coming: close rather than read and discard the rest of it.
            response.headers["connection"] = "close"
        await response(scope, receive, send)
