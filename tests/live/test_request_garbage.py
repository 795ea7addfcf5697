"""A request leaves no cycle through the handler's own frame: a client that
hangs up as its answer arrives (as a game client that opens a connection
per call does) once left the handler's frame, its tasks and everything the
request made reachable only by the garbage collector's slowest pass."""

import asyncio
import gc
import types

import pytest

from studio.asgi import application


class HangsUpOnTheAnswer:
    """Drives the ASGI application as Daphne would, the client closing its
    connection the moment the answer's last piece is sent."""

    def __init__(self, path: str):
        self.scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"localhost")],
            "client": ("127.0.0.1", 50000),
            "server": ("localhost", 80),
        }
        self.answered, self.asked, self.status = asyncio.Event(), 0, None

    async def receive(self):
        self.asked += 1
        if self.asked == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.answered.wait()
        return {"type": "http.disconnect"}

    async def send(self, message):
        if message["type"] == "http.response.start":
            self.status = message["status"]
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.answered.set()
            for _ in range(3):  # the listener hears the hang-up before the answer's task ends
                await asyncio.sleep(0)


def handler_tracebacks() -> list:
    return [
        tb
        for tb in gc.get_objects()
        if isinstance(tb, types.TracebackType) and tb.tb_frame.f_code.co_name == "_serve"
    ]


@pytest.mark.django_db
async def test_a_client_that_hangs_up_on_its_answer_leaves_no_cycle_through_the_handler():
    client = HangsUpOnTheAnswer("/healthz")
    gc.collect()
    gc.disable()
    try:
        await asyncio.wait_for(application(client.scope, client.receive, client.send), 10)

        assert client.status is not None and client.asked == 2
        assert handler_tracebacks() == []
    finally:
        gc.enable()
