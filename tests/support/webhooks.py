"""A webhook receiver on loopback: a real HTTP server in a thread, as a
game's own server would be. It answers each POST with the next status of
`answers` (the last one for good), checks the studio's signature with the
secret it is given, and keeps what it was sent."""

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict
    body: bytes
    status: int  # what the receiver answered
    signed: bool  # whether the signature checked out with the secret

    @property
    def json(self) -> dict:
        return json.loads(self.body)


def signature_checks(secret: str, header: str, body: bytes, *, tolerance: float = 300) -> bool:
    """What a receiver does: the header's `t` is recent, and its `v1` is
    the HMAC-SHA256 of "<t>.<body>" keyed with the secret."""
    try:
        parts = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))


class Receiver:
    def __init__(self, answers=(200,)):
        self.answers = list(answers)
        self.secret = ""
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    status = receiver.answers.pop(0) if len(receiver.answers) > 1 else receiver.answers[0]
                    signed = signature_checks(receiver.secret, self.headers.get("Studio-Signature", ""), body)
                    receiver.received.append(Received(dict(self.headers), body, status, signed))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/studio-alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
