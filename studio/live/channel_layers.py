"""The embedded default's channel layer: Channels' in-memory layer, safe to
send to from any thread.

A background turn (a `wait: false` send) publishes from a thread with an
event loop of its own while the listeners wait on the server's loop. An
asyncio queue is not thread-safe: a message put from another thread lands
in the queue but does not wake the loop waiting on it, so listeners heard a
background turn's events in batches, whenever something else woke the
server (about once a second). Here a send from another loop is handed to
the serving loop's own thread, which wakes it."""

import asyncio

from channels import layers


class InMemoryChannelLayer(layers.InMemoryChannelLayer):
    # The loop the consumers receive on: one per server process.
    _serving: asyncio.AbstractEventLoop | None = None

    async def receive(self, channel):
        self._serving = asyncio.get_running_loop()
        return await super().receive(channel)

    async def send(self, channel, message):
        serving = self._serving
        if serving is None or serving is asyncio.get_running_loop() or not serving.is_running():
            return await super().send(channel, message)
        handed = asyncio.run_coroutine_threadsafe(super().send(channel, message), serving)
        return await asyncio.wrap_future(handed)
