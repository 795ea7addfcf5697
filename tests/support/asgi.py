"""Requests through the studio's real ASGI application, as Daphne hands
them over, without a server."""

from asgiref.testing import ApplicationCommunicator

from studio.asgi import application

# The address every request here comes from.
CLIENT = ("203.0.113.9", 50123)


def http_scope(path: str, *, method: str = "GET", query: bytes = b"", headers=()) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": [(b"host", b"testserver"), *headers],
        "client": CLIENT,
        "server": ("127.0.0.1", 8000),
    }


async def asgi_request(scope: dict, body: bytes = b"") -> tuple[int, dict]:
    """Send one request through the ASGI application; (status, headers),
    once the application has returned."""
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": body})
    start = await communicator.receive_output(10)
    assert start["type"] == "http.response.start"
    while (await communicator.receive_output(10)).get("more_body"):
        pass
    await communicator.wait(10)
    return start["status"], {name.decode().lower(): value.decode() for name, value in start["headers"]}
