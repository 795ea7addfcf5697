"""Calls to the API of a studio server a test started, over real HTTP."""

import json
import urllib.error
import urllib.request


def request(method: str, url: str, key: str, body: dict | None = None) -> tuple[int, dict]:
    """(status, JSON body) of one call to `url` with `key`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def call_api(url: str, key: str, method: str, path: str, body=None, headers=None) -> tuple[int, dict]:
    """(status, JSON body) of one call to `path` under the API of the
    server at `url`; a body that is not JSON comes back as {"raw": ...}."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + "/api/v1" + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw or b"{}")
        except ValueError:
            return error.code, {"raw": raw[:300].decode(errors="replace")}
