"""The studio's client for Python game servers: the spec's `io.Agent`, in
Python. `connect(url, key)` for code that blocks, `connect_async(url, key)`
for asyncio; both answer with the studio's JSON shapes as dicts and raise
one error, `StudioError`. See README.md beside this package."""

from ._async import AsyncAgent, AsyncStudio, connect_async
from ._common import OUT_OF_CREDITS, StudioError, Tool, ToolContext, tool
from ._sync import Agent, Studio, connect

__all__ = [
    "Agent",
    "AsyncAgent",
    "AsyncStudio",
    "OUT_OF_CREDITS",
    "Studio",
    "StudioError",
    "Tool",
    "ToolContext",
    "connect",
    "connect_async",
    "tool",
]
