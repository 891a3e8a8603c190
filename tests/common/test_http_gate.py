"""`RequestGate` and `cancel_on_disconnect` driven through the ASGI interface itself, in
front of a real FastAPI app: what the gate reads of a request before it refuses it (nothing,
or the body only up to its cap), what it answers, and what reaches the app."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from etude.common.http_gate import Refusal, RequestGate
from etude.common.http_server import CLIENT_CLOSED_REQUEST, cancel_on_disconnect

TOKEN = "right"
CAP, RUNS_CAP = 1000, 5000


def refusal(authorization: str | None) -> Refusal | None:
    if authorization == f"Bearer {TOKEN}":
        return None
    return Refusal(401, "no") if authorization is None else Refusal(403, "not you")


def gated() -> tuple[RequestGate, list[bytes]]:
    """The gate over an app that records the bodies it read."""
    app = FastAPI()
    bodies: list[bytes] = []

    @app.post("/runs")
    @app.post("/open")
    async def echo(request: Request) -> dict:
        bodies.append(await request.body())
        return {"size": len(bodies[-1])}

    gate = RequestGate(
        app,
        authorize=refusal,
        guarded=["/runs", "/tasks/"],
        respond=lambda r: JSONResponse({"detail": r.message}, r.status),
        max_body_bytes=CAP,
        body_limits={"/runs": RUNS_CAP},
    )
    return gate, bodies


class Client:
    """One HTTP request through the ASGI interface: its body as `chunks`, each handed out
    by `receive` once asked for, then a disconnect."""

    def __init__(self, path: str, chunks: list[bytes], headers: dict[str, str]) -> None:
        self.scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1234),
        }  # fmt: skip
        self.chunks = list(chunks)
        self.read = 0  # chunks handed to the server
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        if self.read < len(self.chunks):
            self.read += 1
            more = self.read < len(self.chunks)
            return {"type": "http.request", "body": self.chunks[self.read - 1], "more_body": more}
        await asyncio.sleep(3600)  # the client waits for its answer
        raise AssertionError("unreachable")

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    async def run(self, app) -> tuple[int, dict[str, str], dict]:
        await asyncio.wait_for(app(self.scope, self.receive, self.send), 10)
        [start, *body] = self.sent
        assert start["type"] == "http.response.start"
        headers = {k.decode(): v.decode() for k, v in start["headers"]}
        content = b"".join(m.get("body", b"") for m in body)
        return start["status"], headers, json.loads(content)


def with_length(body: bytes, **headers: str) -> dict[str, str]:
    return {"content-length": str(len(body)), "content-type": "application/json", **headers}


AUTHORIZED = {"authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"authorization": "Bearer wrong"}, 403)],
)
async def test_a_guarded_path_is_refused_before_a_byte_of_the_body_is_read(headers, status):
    gate, bodies = gated()
    body = b"x" * 10_000_000  # promised; the gate must not ask for any of it
    client = Client("/runs", [body], with_length(body, **headers))
    answer, response_headers, detail = await client.run(gate)
    assert (answer, client.read, bodies) == (status, 0, [])
    assert detail == {"detail": "no" if status == 401 else "not you"}
    # The rest of a body still coming is not read and discarded: the connection closes.
    assert response_headers["connection"] == "close"


async def test_a_refusal_with_no_body_to_come_keeps_the_connection():
    gate, _ = gated()
    client = Client("/runs", [], {})
    status, headers, _ = await client.run(gate)
    assert status == 401 and "connection" not in headers


async def test_guarded_prefixes_cover_their_subpaths_only():
    gate, _ = gated()
    assert gate.needs_credential("/runs") and gate.needs_credential("/runs/a/stop")
    assert gate.needs_credential("/tasks") and gate.needs_credential("/tasks/x")
    assert not gate.needs_credential("/runsx") and not gate.needs_credential("/open")
    assert gate.limit_of("/runs/") == RUNS_CAP and gate.limit_of("/runs/x") == CAP


async def test_an_open_path_and_an_authorized_request_reach_the_app():
    gate, bodies = gated()
    body = b'{"a": 1}'
    assert (await Client("/open", [body], with_length(body)).run(gate))[0] == 200
    status, _, answer = await Client("/runs", [body], with_length(body, **AUTHORIZED)).run(gate)
    assert (status, answer, bodies) == (200, {"size": len(body)}, [body, body])


@pytest.mark.parametrize(("path", "cap"), [("/open", CAP), ("/runs", RUNS_CAP)])
async def test_a_declared_length_over_the_routes_cap_is_refused_unread(path, cap):
    gate, bodies = gated()
    body = b"1" * (cap + 1)
    client = Client(path, [body], with_length(body, **AUTHORIZED))
    status, headers, answer = await client.run(gate)
    assert (status, client.read, bodies) == (413, 0, [])
    assert f"({cap:,} bytes)" in answer["detail"] and headers["connection"] == "close"
    exact = b"1" * cap  # the cap itself is allowed
    assert (await Client(path, [exact], with_length(exact, **AUTHORIZED)).run(gate))[0] == 200


async def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_cap():
    gate, bodies = gated()
    chunks = [b"1" * 400] * 100  # 40,000 bytes, no length declared
    client = Client("/open", chunks, {"transfer-encoding": "chunked"})
    status, headers, answer = await client.run(gate)
    # The third chunk passes 1,000 bytes: nothing after it is asked for, the app's own
    # answer to the failed read is dropped, the client gets the 413.
    assert (status, client.read, bodies) == (413, 3, [])
    assert "(1,000 bytes)" in answer["detail"] and headers["connection"] == "close"
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]


async def test_a_chunked_body_within_the_cap_reaches_the_app_whole():
    gate, bodies = gated()
    chunks = [b"1" * 300] * 3
    status, _, answer = await Client("/open", chunks, {"transfer-encoding": "chunked"}).run(gate)
    assert (status, answer, bodies) == (200, {"size": 900}, [b"".join(chunks)])


async def test_other_scopes_pass_through():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    gate = RequestGate(
        app, authorize=refusal, guarded=["/"], respond=None, max_body_bytes=1
    )  # fmt: skip
    await gate({"type": "lifespan"}, None, None)
    assert seen == ["lifespan"]


# -- cancel_on_disconnect --------------------------------------------------------------------


async def test_work_that_finishes_first_answers():
    async def receive() -> dict:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def work() -> str:
        await asyncio.sleep(0.01)
        return "done"

    assert await cancel_on_disconnect(receive, work()) == "done"


async def test_a_disconnect_cancels_the_work_and_waits_for_its_cleanup():
    left = asyncio.Event()
    cleaned = []

    async def receive() -> dict:
        await left.wait()
        return {"type": "http.disconnect"}

    async def work() -> str:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # cleanup that itself awaits (closing a stream)
            cleaned.append(True)
        return "never"

    asyncio.get_running_loop().call_later(0.05, left.set)
    answer = await asyncio.wait_for(cancel_on_disconnect(receive, work()), 5)
    assert answer.status_code == CLIENT_CLOSED_REQUEST and cleaned == [True]


async def test_an_error_of_the_work_is_raised():
    async def receive() -> dict:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def work() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await cancel_on_disconnect(receive, work())
