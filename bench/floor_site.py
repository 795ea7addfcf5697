"""The floor of bench/floor.py: what this stack costs for a (b) message's
input and output, with none of the studio's own work.

One module is the site's settings, its URLs and its ASGI application:
`DJANGO_SETTINGS_MODULE=floor_site daphne floor_site:application` (with
bench/ on PYTHONPATH). The settings are the studio's (its database with
its pool, DEBUG off), without middleware, and the request reaches the view
as the studio's requests do (`SyncChainASGIHandler`: one hand-off to a kept
thread) — the leanest path this stack has for a request.

`POST /message?statements=S&calls=C&events=E` (the body a (b) message's,
read and decoded) runs S `SELECT 1`s on the request's pooled connection,
C streamed chat completions against OPENAI_BASE_URL (the first asks with
the tools, the next with the tool's result, as a turn with one memory call
does), each chunk decoded, and E Redis script calls; then answers a small
JSON turn. Each goes by the leanest way the studio itself has: statements
straight to libpq (`studio.runtime.sql.run`), calls on its own HTTP/1.1
connections (`agents.providers.http1`), scripts on its lean Redis
connections (`studio.runtime.redisconn`).
"""

import json
import os

from studio.settings import *  # noqa: F403  (the studio's settings, then the floor's changes)

ROOT_URLCONF = "floor_site"
MIDDLEWARE: list[str] = []

import django  # noqa: E402

django.setup(set_prefix=False)

from django.http import JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

from agents.providers.http1 import Pool, sse_events  # noqa: E402
from studio.runtime import sql  # noqa: E402
from studio.runtime.redisconn import lean_client  # noqa: E402
from studio.serving.handlers import SyncChainASGIHandler  # noqa: E402

SYSTEM = {"role": "system", "content": "You are the floor of the benchmark. Keep a memory named notes open."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "open_memory",
            "description": "Open a memory by name.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
    }
]
MODEL = Pool(os.environ["OPENAI_BASE_URL"], connect_timeout=5, read_timeout=60, tls_context=None)
CHAT = MODEL.request_head(
    "/chat/completions",
    {"authorization": f"Bearer {os.environ['OPENAI_API_KEY']}", "content-type": "application/json"},
)
EVENT = lean_client().script("return redis.call('INCR', KEYS[1])")


def _chat(messages: list[dict]) -> list[dict]:
    body = {"model": "bench", "messages": messages, "tools": TOOLS, "stream": True}
    body["stream_options"] = {"include_usage": True}
    answer = MODEL.post(CHAT, json.dumps(body).encode())
    try:
        return [json.loads(data) for _, data in sse_events(answer.iter_bytes()) if data and data != "[DONE]"]
    finally:
        answer.close()


@csrf_exempt
def message(request):
    said = json.loads(request.body)["content"]
    statements, calls, events = (int(request.GET.get(name, 0)) for name in ("statements", "calls", "events"))
    for _ in range(statements):
        sql.run("SELECT 1")
    messages = [SYSTEM, {"role": "user", "content": said}]
    for index in range(calls):
        _chat(messages)
        if index == 0:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "open_memory", "arguments": "{}"},
            }
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "notes: open"},
            ]
    for _ in range(events):
        EVENT(keys=["floor:events"], args=[])
    return JsonResponse({"turn": {"status": "completed", "toolCalls": []}})


urlpatterns = [path("message", message)]
application = SyncChainASGIHandler()
