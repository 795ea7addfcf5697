"""Agent files written by hand, for tests of what the studio does with what
an import may carry: every part in the shape `POST /agents/import` takes."""

import json

AT = "2026-11-30T12:00:00+00:00"


def agent_file(name: str, **parts) -> dict:
    """A file of an agent with memory on; `parts` are its lists and config."""
    config = parts.pop("config", {"systemPrompt": "You are the archivist.", "memory": {}})
    return {"format": "studio.agent", "version": 1, "name": name, "config": config, **parts}


def memory(name: str, content: str, *, is_open: bool = False) -> dict:
    return {
        "name": name,
        "description": f"About {name}",
        "content": content,
        "open": is_open,
        "version": 1,
        "updatedAt": AT,
        "updatedBy": "agent",
    }


def checkpoint(number: int, summary: str | None, *, through: int = 0) -> dict:
    """Checkpoint `number`, with no memories; its context block is left
    empty (a file's may be shorter than its parts rendered, not longer)."""
    return {
        "id": number,
        "kind": "compaction",
        "throughBlock": through,
        "fromBlock": None,
        "createdAt": AT,
        "summary": summary,
        "openMemories": [],
        "closedMemories": [],
        "contextBlock": "",
    }


def state(name: str, content: str, *, is_open: bool = True) -> dict:
    return {"description": f"About {name}", "content": content, "open": is_open, "version": 1}


def change(name: str, kind: str, before: dict | None, after: dict | None, **more) -> dict:
    return {
        "name": name,
        "change": kind,
        "by": more.pop("by", "agent"),
        "turnId": None,
        "block": None,
        "checkpoint": more.pop("checkpoint", None),
        "before": before,
        "after": after,
        "note": more.pop("note", None),
        "at": AT,
    }


def block(number: int, player: str, reply: str = "ok") -> dict:
    return {
        "block": number,
        "status": "completed",
        "folded": False,
        "createdAt": AT,
        "entries": [
            {"type": "message", "role": "user", "content": player},
            {"type": "message", "role": "assistant", "content": reply},
        ],
        "turn": None,
        "context": None,
    }


async def _joined(chunks) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def exported(response) -> dict:
    """The agent file an export answered (streamed, as it is read)."""
    from asgiref.sync import async_to_sync

    assert response.status_code == 200, response.status_code
    return json.loads(async_to_sync(_joined)(response.streaming_content))
