"""A loopback OpenAI-compatible model that calls several tools in one
step — what the `scripted` model never does (one call a step) — for the
clients' tests, which run against a real studio in processes of its own.

It plays the player's newest message as the scripted model plays a script,
but a step may be several calls at once:

    {"script": [{"calls": [{"call": "give_item", "args": {"item": "ale"}},
                           {"call": "look_up_purse", "args": {}}]},
                {"say": "Enjoy."}]}

Each model step after that message answers the next `calls` step (every
call in it, in one assistant message), then the `say` (`ok` without one).
Any other message gets `ok`. Point a studio at it with `environment()`.
"""

import json

from tests.support.fake_openai import FakeOpenAI, completion, tool_call

MODEL = "openai:several-calls"


def answer(body: dict) -> dict:
    messages = body.get("messages") or []
    newest = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    steps = _script(messages[newest].get("content") if newest >= 0 else None)
    done = sum(1 for m in messages[newest + 1 :] if m.get("role") == "assistant" and m.get("tool_calls"))
    calls = [step["calls"] for step in steps if isinstance(step.get("calls"), list)]
    if done < len(calls) and body.get("tools"):
        return completion(tool_calls=[tool_call(c["call"], c.get("args") or {}) for c in calls[done]])
    says = [step["say"] for step in steps if "say" in step]
    return completion(str(says[-1]) if says else "ok")


def _script(content) -> list[dict]:
    try:
        script = json.loads(content)["script"]
    except (TypeError, ValueError, KeyError):
        return []
    return [step for step in script if isinstance(step, dict)] if isinstance(script, list) else []


def start() -> FakeOpenAI:
    fake = FakeOpenAI()
    fake.answer_for = answer
    return fake.start()


def environment(fake: FakeOpenAI) -> dict:
    """What a studio's processes need to play agents on `MODEL` there."""
    return {
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "test-key",
        "STUDIO_ALLOW_UNPRICED_MODELS": MODEL,
    }
