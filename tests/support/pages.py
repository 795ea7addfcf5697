"""The studio's pages as a test reads and fills them in."""

# An agent's config form, filled in as a designer would (the agent page's
# form and the admin's).
CONFIG = {
    "system_prompt": "You are the dungeon master. Keep `quest` open.",
    "model": "scripted",
    "memory_enabled": "on",
    "max_open_tokens": "1000",
    "compaction_type": "summarize",
    "max_tokens": "8000",
}


def html(response) -> str:
    return response.content.decode()
