"""The client for asyncio code: `connect_async(url, key)` → `AsyncStudio`,
the twin of `_sync.Studio` call for call (what either decides is in
`_common`): a definition is sent in a task, an agent's events are heard in
a task of its own."""

from __future__ import annotations

import asyncio
import inspect
import types
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from . import _common as c
from ._common import StudioError


def connect_async(url: str, key: str, *, retries: int = 5, timeout: float = 30.0) -> AsyncStudio:
    """`connect`, for asyncio: every call that talks to the studio is awaited."""
    return AsyncStudio(url, key, retries=retries, timeout=timeout)


class AsyncStudio:
    """`io` for asyncio: `io.Agent` and `io.agents`, as `Studio`'s."""

    def __init__(self, url: str, key: str, *, retries: int = 5, timeout: float = 30.0):
        self.url, self.retries, self.timeout = url.rstrip("/"), retries, timeout
        self._key = key
        self._http = httpx.AsyncClient(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )
        self._definitions: dict[str, tuple[str, asyncio.Task]] = {}
        self._heeded: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()  # definitions game code awaited
        self._listeners: dict[str, _Listener] = {}
        self._tool_tasks: set[asyncio.Task] = set()  # the game's tools running, of every send
        self.agents = types.SimpleNamespace()
        self.Agent = type("Agent", (AsyncAgent,), {"_studio": self, "__module__": __name__})

    async def billing(self) -> dict:
        return await self._request("GET", "/billing")

    async def aclose(self) -> None:
        listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.stop()
        for task in self._tool_tasks:
            task.cancel()
        pending = [task for _, task in self._definitions.values()] + [listener.task for listener in listeners]
        await asyncio.gather(*pending, *self._tool_tasks, return_exceptions=True)
        await self._http.aclose()

    async def __aenter__(self) -> AsyncStudio:
        return self

    async def __aexit__(self, *_) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, *, repeatable: bool = True, **kwargs):
        async def attempt():
            return c.checked(await self._http.request(method, path, **kwargs))

        return await self._retrying(attempt, repeatable=repeatable)

    async def _retrying(self, attempt: Callable[[], Awaitable], *, repeatable: bool = True):
        tries = 0
        while True:
            try:
                return await attempt()
            except (StudioError, httpx.TransportError, c.StreamCut) as error:
                delay = c.retry_delay(error, tries, self.retries, repeatable=repeatable)
                if delay is None and isinstance(error, StudioError):
                    raise
                if delay is None:
                    raise c.unreachable(self.url, error, repeatable=repeatable) from error
            await asyncio.sleep(delay)
            tries += 1

    def _define(self, name: str, body: dict, headers: dict | None = None) -> asyncio.Task:
        text = c.same_definition(body)
        known = self._definitions.get(name)
        if not headers and known and known[0] == text and not (known[1].done() and known[1].exception()):
            return known[1]
        task = asyncio.ensure_future(self._put(name, body, known[1] if known else None, headers or {}))
        task.add_done_callback(lambda done: self._seen(name, done))
        self._definitions[name] = (text, task)
        return task

    def _seen(self, name: str, task: asyncio.Task) -> None:
        """A definition nobody awaited may fail: its error is logged (an
        error: shown even where logging is not set up) and raised where the
        agent is next used — not reported as never retrieved."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and task not in self._heeded:
            c.log.error(c.unheeded_definition(name, error))

    async def _put(self, name: str, body: dict, before: asyncio.Task | None, headers: dict) -> dict:
        if before is not None:  # the last definition sent is the one that stays
            await asyncio.wait([before])
        return await self._request("PUT", c.agent_path(name), json=body, headers=headers)

    async def _follow(self, path: str, reader: c.EventStreamReader, on_text, **kwargs) -> dict:
        kwargs.setdefault("timeout", httpx.Timeout(self.timeout, read=c.SEND_TIMEOUT_SECONDS))
        async with self._http.stream(kwargs.pop("method", "GET"), path, **kwargs) as response:
            if response.status_code != 200:
                await response.aread()
                c.checked(response)
            async for line in response.aiter_lines():
                text = reader.line(line)
                if text and on_text is not None:
                    await _maybe_awaited(on_text(text))
                if reader.turn is not None:
                    return reader.turn
        raise c.StreamCut()


async def _maybe_awaited(result) -> None:
    if inspect.isawaitable(result):
        await result


class AsyncAgent:
    """`io.Agent(name, options)` for asyncio: constructed as `Agent` is
    (the rule is checked at once), and defined in a task; `await
    agent.ready` for the studio's answer. Its other calls are awaited."""

    _studio: AsyncStudio

    def __init__(self, name: str, options: dict | None = None, *, if_match: int | str | None = None, **more):
        self.name = name
        self.options = {**(options or {}), **more}
        self._headers = c.if_match_header(name, if_match)
        self._body = c.definition(self.options, name)
        self._tools = c.tool_handlers(self.options)
        self._defined: asyncio.Task | None = None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # defined when first awaited
        self._defined = self._studio._define(name, self._body, self._headers)

    def __repr__(self) -> str:
        return f"<AsyncAgent {self.name!r}>"

    @property
    def ready(self) -> asyncio.Task:
        """Awaitable: the agent as the studio answered its definition."""
        if self._defined is None:
            self._defined = self._studio._define(self.name, self._body, self._headers)
        self._studio._heeded.add(self._defined)
        return self._defined

    @property
    def revision(self) -> int | None:
        """As `Agent.revision`: None until `ready` is done."""
        task = self._defined
        done = task is not None and task.done() and not task.cancelled() and task.exception() is None
        return c.revision_of(task.result()) if done else None

    @property
    def etag(self) -> str | None:
        return None if self.revision is None else f'"{self.revision}"'

    async def send(
        self,
        content: str,
        *,
        transient: bool = False,
        on_text: Callable[[str], object] | None = None,
        idempotency_key: str | None = None,
    ) -> dict:
        """As `Agent.send`; `on_text` may be a coroutine function, and so
        may the functions of the game's tools (each call runs in a task of
        its own)."""
        key = idempotency_key or str(uuid.uuid4())
        try:
            await self.ready
        except StudioError as refused:  # the definition's error, every send's until it is defined again
            raise refused.of_send(key) from refused
        studio, path = self._studio, c.agent_path(self.name, "/messages")
        headers = {"Idempotency-Key": key}
        body = {"content": content, "transient": transient}
        calls = _ToolCalls(studio, self.name, self._tools) if self._tools else None
        reader = c.EventStreamReader(on_event=calls.heard if calls else None)
        try:
            if on_text is not None:
                body["stream"] = True
                headers["Accept"] = "text/event-stream"

            async def attempt() -> dict:
                if reader.follows:  # the studio could not follow the turn: its events, by its id
                    return await studio._follow(
                        c.turn_events_path(self.name, reader.turn_id), reader, on_text
                    )
                if on_text is not None:
                    return await studio._follow(
                        path, reader, on_text, method="POST", json=body, headers=headers
                    )
                timeout = httpx.Timeout(studio.timeout, read=c.SEND_TIMEOUT_SECONDS)
                response = await studio._http.post(path, json=body, headers=headers, timeout=timeout)
                turn = c.checked(response)["turn"]
                if response.status_code != 202:
                    return turn
                # Not ended: it waits for the game's tools, or enough repeats wait on it already.
                reader.turn_id = turn["id"]
                for pending in turn.get("pendingToolCalls") or ():
                    if calls is not None:
                        calls.requested({"turnId": turn["id"], **pending})
                return await studio._follow(c.turn_events_path(self.name, turn["id"]), reader, None)

            return await studio._retrying(attempt)
        except StudioError as error:
            error.idempotency_key = key
            raise
        finally:
            if calls is not None:
                calls.end()

    async def turn_by_idempotency_key(self, key: str) -> dict | None:
        """As `Agent.turn_by_idempotency_key`."""
        if not isinstance(key, str) or not key:
            raise TypeError("key is a send's Idempotency-Key (error.idempotency_key)")
        await asyncio.wait([self.ready])  # refused or not: the agent may be there all the same
        params = {"idempotencyKey": key, "limit": 1}
        page = await self._studio._request("GET", c.agent_path(self.name, "/turns"), params=params)
        return page["turns"][0] if page["turns"] else None

    async def on(self, kind: str, handler: Callable[[dict], object]) -> Callable[[], None]:
        """As `Agent.on`, in a task; `handler` may be a coroutine function.
        Returns `off()` (not awaited) once the studio listens."""
        await self.ready
        studio = self._studio
        listener = studio._listeners.get(self.name)
        if listener is None:
            listener = studio._listeners[self.name] = _Listener(studio, self.name)
        listener.handlers.add(kind, handler)

        def off() -> None:
            if not listener.handlers.remove(kind, handler):
                return
            if studio._listeners.get(self.name) is listener:
                del studio._listeners[self.name]
            listener.stop()

        try:
            await asyncio.wait_for(listener.opened.wait(), studio.timeout)
        except TimeoutError:
            pass  # the listener goes on trying
        if listener.refusal is not None:
            off()
            raise c.as_error(listener.refusal)
        return off

    async def memories(
        self, *, at_block: int | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict:
        await self.ready
        params = c.query(atBlock=at_block, limit=limit, cursor=cursor)
        return await self._studio._request("GET", c.agent_path(self.name, "/memories"), params=params)

    async def history(self, *, after: int | None = None, limit: int | None = None) -> AsyncIterator[dict]:
        await self.ready
        params = c.query(after=after, limit=limit)
        while True:
            page = await self._studio._request("GET", c.agent_path(self.name, "/history"), params=params)
            yield page
            if not page.get("nextCursor"):
                return
            params = c.query(cursor=page["nextCursor"], limit=limit)

    async def context(self, *, at_block: int | None = None) -> dict:
        path = c.agent_path(self.name, "/context")
        await self.ready
        return await self._studio._request("GET", path, params=c.query(atBlock=at_block))

    async def cost(self, turn) -> dict:
        await self.ready
        path = c.agent_path(self.name, f"/turns/{c.turn_id_of(turn)}")
        return (await self._studio._request("GET", path))["turn"]["cost"]

    async def replay(
        self,
        *,
        from_block: int,
        definition: dict | None = None,
        through: int | None = None,
        on_progress: Callable[[dict], object] | None = None,
    ) -> dict:
        """As `Agent.replay`; `on_progress` may be a coroutine function.
        Cancelling the task that awaits it stops the wait, not the replay
        (`replay_cancel` does)."""
        await self.ready
        studio = self._studio
        inbox: asyncio.Queue[dict] = asyncio.Queue()
        off = await self.on("*", inbox.put_nowait)  # so it hears the replay's first block
        try:
            body = c.replay_body(from_block, definition, through)
            path = c.agent_path(self.name, "/replays")
            replay = (await studio._request("POST", path, json=body, repeatable=False))["replay"]
            followed = c.ReplayFollowed(replay)
            events: list[dict] = []
            while True:
                progress, ask = followed.heard(events)
                for event in progress:
                    if on_progress is not None:
                        await _maybe_awaited(on_progress(event))
                if ask:
                    followed.replay = (await studio._request("GET", followed.path))["replay"]
                wait = followed.wait()
                if wait is None:
                    return followed.replay
                try:
                    events = [await asyncio.wait_for(inbox.get(), wait)]
                except TimeoutError:
                    events = []
                    if followed.nothing_came():
                        followed.replay = (await studio._request("GET", followed.path))["replay"]
                    continue
                while not inbox.empty():
                    events.append(inbox.get_nowait())
        finally:
            off()

    async def replays(self, *, limit: int | None = None, cursor: str | None = None) -> dict:
        await self.ready
        params = c.query(limit=limit, cursor=cursor)
        return await self._studio._request("GET", c.agent_path(self.name, "/replays"), params=params)

    async def replay_cancel(self, replay) -> dict:
        await self.ready
        path = c.agent_path(self.name, f"/replays/{c.replay_id_of(replay)}/cancel")
        return (await self._studio._request("POST", path))["replay"]


class _ToolCalls:
    """The game's tool calls of one send, as `_sync._ToolCalls`: each run in
    a task of its own (a plain function is called in the loop, as event
    handlers are), cancelled once the call is no longer waited for."""

    def __init__(self, studio: AsyncStudio, agent: str, handlers: dict):
        self.studio, self.agent = studio, agent
        self.calls = c.ToolCalls(handlers, asyncio.Event)
        self.tasks: dict[str, asyncio.Task] = {}

    def heard(self, kind: str, event: dict) -> None:
        if kind == "tool.requested":
            self.requested(event)
        elif kind == "tool.answered":
            made = self.calls.answered(event)
            if made is not None:
                self._cancel(made)

    def requested(self, call: dict) -> None:
        made = self.calls.requested(call)
        if made is None:
            return
        task = self.tasks[made.ctx.call_id] = asyncio.ensure_future(self._run(made))
        self.studio._tool_tasks.add(task)
        task.add_done_callback(self.studio._tool_tasks.discard)

    def end(self) -> None:
        for made in self.calls.ended():
            self._cancel(made)

    def _cancel(self, made: c.ToolCall) -> None:
        made.ctx.cancelled.set()
        self.tasks[made.ctx.call_id].cancel()

    async def _run(self, made: c.ToolCall) -> None:
        name = made.ctx.name
        try:
            try:
                arguments = await self._arguments(made)
                if arguments is c.NOT_WAITED_ON:
                    return  # answered elsewhere, or the turn ended
                result = made.run(arguments or {}, made.ctx)
                answer = c.tool_answer(name, await result if inspect.isawaitable(result) else result)
            except Exception as error:  # the model reads what went wrong
                answer = {"error": c.tool_error_text(name, error)}
            if made.ctx.cancelled.is_set():
                return  # answered without it, or the turn ended
            made.posting = True
            await self._answer(made, answer)
        finally:
            made.done = True

    async def _arguments(self, made: c.ToolCall):
        """The call's arguments whole: read from its turn when the event cut them."""
        if not c.is_cut(made.call):
            return made.call.get("arguments")
        turn = (await self.studio._request("GET", c.turn_path(self.agent, made.ctx.turn_id)))["turn"]
        return c.pending_arguments(turn, made.ctx.call_id)

    async def _answer(self, made: c.ToolCall, answer: dict) -> None:
        path = c.tool_results_path(self.agent, made.ctx.turn_id)
        try:
            await self.studio._request("POST", path, json={"callId": made.ctx.call_id, **answer})
        except StudioError as error:
            if error.status == 409:
                return  # answered already, or the turn ended
            if error.status in (400, 413) and "error" not in answer:
                # A result the studio will not keep: the model reads why, rather than wait for the deadline.
                await self._answer(made, c.tool_refused(made.ctx.name, error))
                return
            c.log.warning(
                "the answer to %s (%s) could not be sent: %s", made.ctx.name, made.ctx.call_id, error
            )


class _Listener:
    """One agent's WebSocket, in a task: as `_sync._Listener`."""

    def __init__(self, studio: AsyncStudio, name: str):
        self.studio, self.name = studio, name
        self.handlers = c.Handlers()
        self.opened = asyncio.Event()
        self.refusal: dict | None = None
        self.task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        self.task.cancel()

    async def _run(self) -> None:
        tries = 0
        while True:
            code = None
            try:
                url = c.events_url(self.studio.url, self.name, self.handlers.since)
                async with ws_connect(
                    url, subprotocols=c.subprotocols(self.studio._key), open_timeout=self.studio.timeout
                ) as socket:
                    async for message in socket:
                        event, handlers = self.handlers.heard(message)
                        if event.get("type") == "hello":
                            tries = 0
                            self.opened.set()
                        for handler in handlers:
                            await _handed(handler, event)
                code = socket.close_code
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
            except Exception as failure:  # no socket: refused, cut, timed out, no studio there
                c.log.info("listening to %s's events failed: %r", self.name, failure)
                code = None
            delay, error = self.handlers.closed(code, tries)
            if delay is None:
                self.refusal = error
                if self.studio._listeners.get(self.name) is self:
                    del self.studio._listeners[self.name]
                for handler in self.handlers.of("error"):
                    await _handed(handler, error)
                self.opened.set()
                return
            tries += 1
            await asyncio.sleep(delay)


async def _handed(handler: Callable, event: dict) -> None:
    try:
        await _maybe_awaited(handler(event))
    except Exception:  # one handler's bug must not stop the agent's events
        c.log.exception("an event handler raised")
