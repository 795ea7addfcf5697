"""What the loopback fakes share to answer a request that asks for a
stream: server-sent events, written one at a time as a real provider does,
and text cut into the word-sized pieces a model streams."""

import json
import re
import threading

WORDS = re.compile(r"\s*\S+\s*|\s+")


def pieces(text: str) -> list[str]:
    """`text` in word-sized pieces that join back to it."""
    return WORDS.findall(text)


def write_events(
    handler, events, *, pause: float = 0, stopping: threading.Event, cut_after=None, keep_alive=False
) -> bool:
    """Answer 200 `text/event-stream` with `events` ((name or None, data)
    pairs), `pause` seconds apart; with `cut_after`, the connection drops
    after that many events. With `keep_alive` (an HTTP/1.1 handler), the
    body is chunked and the connection kept, as real providers do. True
    when every event was sent."""
    handler.close_connection = not keep_alive

    def write(data: bytes) -> None:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if keep_alive else data)
        handler.wfile.flush()

    try:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header(
            "Transfer-Encoding" if keep_alive else "Connection", "chunked" if keep_alive else "close"
        )
        handler.end_headers()
        for sent, (name, data) in enumerate(events):
            if sent == cut_after:
                handler.close_connection = True
                return False
            if sent and pause and stopping.wait(pause):
                handler.close_connection = True
                return False
            line = data if isinstance(data, str) else json.dumps(data)
            write((f"event: {name}\n" if name else "").encode() + f"data: {line}\n\n".encode())
        if keep_alive:
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):  # the client stopped reading (a cancel)
        return False
    return True
