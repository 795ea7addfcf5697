"""The client for code that blocks: `connect(url, key)` → `Studio`. A
definition is sent from a small thread pool, an agent's events are heard in
a thread of its own; everything else runs in the caller's thread."""

from __future__ import annotations

import inspect
import queue
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from . import _common as c
from ._common import StudioError


def connect(url: str, key: str, *, retries: int = 5, timeout: float = 30.0) -> Studio:
    """The studio at `url` (`http://127.0.0.1:8000`), as the game holding
    the API `key` sees it. `retries`: how often a request is tried again
    after a network error, a 429 or a 503; `timeout`: seconds to wait for
    the studio on anything but a send."""
    return Studio(url, key, retries=retries, timeout=timeout)


class Studio:
    """`io`: `io.Agent` (the class of this studio's agents) and
    `io.agents` (a namespace for game code to keep them in, as the spec does)."""

    def __init__(self, url: str, key: str, *, retries: int = 5, timeout: float = 30.0):
        self.url, self.retries, self.timeout = url.rstrip("/"), retries, timeout
        self._key = key
        self._http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )
        self._lock = threading.Lock()
        self._definitions: dict[str, tuple[str, Future]] = {}
        self._listeners: dict[str, _Listener] = {}
        self._definer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="studio-define")
        self.agents = types.SimpleNamespace()
        self.Agent = type("Agent", (Agent,), {"_studio": self, "__module__": __name__})

    def billing(self) -> dict:
        """The game's balance, limits and prices (`GET /billing`)."""
        return self._request("GET", "/billing")

    def close(self) -> None:
        """Stops every listener and closes the connections."""
        with self._lock:
            listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.stop()
        self._definer.shutdown(wait=True)
        self._http.close()

    def __enter__(self) -> Studio:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    # --- HTTP, tried again on network errors, 429 and 503 ----------------------------------

    def _request(self, method: str, path: str, *, repeatable: bool = True, **kwargs):
        return self._retrying(
            lambda: c.checked(self._http.request(method, path, **kwargs)), repeatable=repeatable
        )

    def _retrying(self, attempt: Callable, *, repeatable: bool = True):
        tries = 0
        while True:
            try:
                return attempt()
            except (StudioError, httpx.TransportError, c.StreamCut) as error:
                delay = c.retry_delay(error, tries, self.retries, repeatable=repeatable)
                if delay is None and isinstance(error, StudioError):
                    raise
                if delay is None:
                    raise c.unreachable(self.url, error, repeatable=repeatable) from error
            time.sleep(delay)
            tries += 1

    def _define(self, name: str, body: dict, headers: dict | None = None) -> Future:
        """The definition's answer; one PUT per new definition of a name,
        none for the one the studio already has from this client (but one
        with If-Match `headers`, always sent). A failure nothing waits on is
        logged (an error: shown even where logging is not set up), and raised
        by the agent's next call."""
        text = c.same_definition(body)
        with self._lock:
            known = self._definitions.get(name)
            if not headers and known and known[0] == text and not (known[1].done() and known[1].exception()):
                return known[1]
            before = known[1] if known else None
            future = _Definition()
            future.add_done_callback(lambda done: _unheeded(name, done))
            self._definer.submit(_settle, future, self._put, name, body, before, headers or {})
            self._definitions[name] = (text, future)
            return future

    def _put(self, name: str, body: dict, before: Future | None, headers: dict) -> dict:
        if before is not None:  # the last definition sent is the one that stays
            futures_wait([before])
        return self._request("PUT", c.agent_path(name), json=body, headers=headers)

    def _follow(self, path: str, reader: c.EventStreamReader, on_text: Callable | None, **kwargs) -> dict:
        """One try at reading a turn's events to `turn.finished`."""
        kwargs.setdefault("timeout", httpx.Timeout(self.timeout, read=c.SEND_TIMEOUT_SECONDS))
        with self._http.stream(kwargs.pop("method", "GET"), path, **kwargs) as response:
            if response.status_code != 200:
                response.read()
                c.checked(response)
            for line in response.iter_lines():
                text = reader.line(line)
                if text and on_text is not None:
                    on_text(text)
                if reader.turn is not None:
                    return reader.turn
        raise c.StreamCut()


class _Definition(Future):
    """A definition's answer, which knows whether game code waited on it."""

    heeded = False

    def result(self, timeout=None):
        self.heeded = True
        return super().result(timeout)


def _settle(future: Future, fn: Callable, *args) -> None:
    try:
        future.set_result(fn(*args))
    except BaseException as error:
        future.set_exception(error)


def _unheeded(name: str, future: _Definition) -> None:
    error = future.exception()
    if error is not None and not future.heeded:
        c.log.error(c.unheeded_definition(name, error))


class Agent:
    """`io.Agent(name, options)`: an agent of the studio, defined with the
    spec's options (`systemPrompt`, `model`, `memory`, `compaction`, and
    the game's `tools`), as a dict or as keywords. The definition-time rule
    is checked at once (StudioError `invalid_definition`); the definition
    is sent in the background, and `ready` is the studio's answer.

    `if_match` (a revision, `agent.revision`, or its ETag, `agent.etag`):
    define the agent only if it is still at that revision of its config —
    if anyone defined it since, `ready` raises StudioError
    `definition_changed` (412) and the agent keeps its config."""

    _studio: Studio

    def __init__(self, name: str, options: dict | None = None, *, if_match: int | str | None = None, **more):
        self.name = name
        self.options = {**(options or {}), **more}
        headers = c.if_match_header(name, if_match)
        body = c.definition(self.options, name)
        self._tools = c.tool_handlers(self.options)
        for tool_name, run in self._tools.items():
            if inspect.iscoroutinefunction(run):
                raise TypeError(
                    f"tool {tool_name!r} is a coroutine function: this client runs plain functions "
                    "(connect_async's runs either)"
                )
        self._defined = self._studio._define(name, body, headers)

    def __repr__(self) -> str:
        return f"<Agent {self.name!r}>"

    @property
    def revision(self) -> int | None:
        """The revision of the agent's config the studio answered the
        definition with; None until that answer is in (after `ready`), or
        when it refused the definition."""
        done = self._defined.done() and self._defined.exception() is None
        return c.revision_of(self._defined.result()) if done else None

    @property
    def etag(self) -> str | None:
        """`revision`'s ETag (`'"3"'`), for `if_match`; None as `revision` is."""
        return None if self.revision is None else f'"{self.revision}"'

    @property
    def ready(self) -> dict:
        """The agent as the studio answered its definition (waits for it);
        raises the studio's StudioError when it refused the definition."""
        return self._defined.result()

    def send(
        self,
        content: str,
        *,
        transient: bool = False,
        on_text: Callable[[str], object] | None = None,
        idempotency_key: str | None = None,
    ) -> dict:
        """Sends `content` as the player and returns the ended turn (`id`,
        `status`, `reply`, `toolCalls`, `cost`, …). With `on_text` the reply
        streams, and each piece of text goes to `on_text` as it is written.
        Every try carries the same Idempotency-Key, so a retry never runs a
        second turn. The turn's calls of the game's tools that have a
        function here are run (each in a thread of its own) and answered on
        the way. Every StudioError it raises carries the key as
        `idempotency_key`: `turn_by_idempotency_key` tells whether it ran."""
        key = idempotency_key or str(uuid.uuid4())
        try:
            self._defined.result()
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

            def attempt() -> dict:
                if reader.follows:  # the studio could not follow the turn: its events, by its id
                    return studio._follow(c.turn_events_path(self.name, reader.turn_id), reader, on_text)
                if on_text is not None:
                    return studio._follow(path, reader, on_text, method="POST", json=body, headers=headers)
                timeout = httpx.Timeout(studio.timeout, read=c.SEND_TIMEOUT_SECONDS)
                response = studio._http.post(path, json=body, headers=headers, timeout=timeout)
                turn = c.checked(response)["turn"]
                if response.status_code != 202:
                    return turn
                # Not ended: it waits for the game's tools, or enough repeats wait on it already.
                reader.turn_id = turn["id"]
                for pending in turn.get("pendingToolCalls") or ():
                    if calls is not None:
                        calls.requested({"turnId": turn["id"], **pending})
                return studio._follow(c.turn_events_path(self.name, turn["id"]), reader, None)

            return studio._retrying(attempt)
        except StudioError as error:
            error.idempotency_key = key
            raise
        finally:
            if calls is not None:
                calls.end()

    def turn_by_idempotency_key(self, key: str) -> dict | None:
        """The turn the send under `key` made (a failed send's
        `error.idempotency_key`), as the studio has it now — how game code
        reconciles a `network_error`: the turn ran (its `status`, `block`
        and `reply`), or None: no send under that key reached the studio or
        ran, so sending again with the same key is safe."""
        if not isinstance(key, str) or not key:
            raise TypeError("key is a send's Idempotency-Key (error.idempotency_key)")
        futures_wait([self._defined])  # refused or not: the agent may be there all the same
        params = {"idempotencyKey": key, "limit": 1}
        turns = self._studio._request("GET", c.agent_path(self.name, "/turns"), params=params)["turns"]
        return turns[0] if turns else None

    def on(self, kind: str, handler: Callable[[dict], object]) -> Callable[[], None]:
        """Calls `handler(event)` for each of the agent's events of type
        `kind` (`"*"`: every one), in a thread of the listener's own, from
        now on: returns once the studio listens. Returns `off()`."""
        self._defined.result()
        studio = self._studio
        with studio._lock:
            listener = studio._listeners.get(self.name)
            if listener is None:
                listener = studio._listeners[self.name] = _Listener(studio, self.name)
            listener.handlers.add(kind, handler)

        def off() -> None:
            with studio._lock:
                if not listener.handlers.remove(kind, handler):
                    return
                if studio._listeners.get(self.name) is listener:
                    del studio._listeners[self.name]
            listener.stop()

        listener.opened.wait(studio.timeout)
        if listener.refusal is not None:
            off()
            raise c.as_error(listener.refusal)
        return off

    def memories(
        self, *, at_block: int | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict:
        """The agent's memory store, read-only: `memories` (each with `name`,
        `description`, `content`, `open`, `tokens`, …), `openTokens`,
        `maxOpenTokens`, `storeBytes`, `storeCapBytes`; `at_block`: as block
        N left it. Up to 1,000 memories a page (`limit`; the next page's
        `cursor` is `nextCursor`)."""
        self._defined.result()
        params = c.query(atBlock=at_block, limit=limit, cursor=cursor)
        return self._studio._request("GET", c.agent_path(self.name, "/memories"), params=params)

    def history(self, *, after: int | None = None, limit: int | None = None) -> Iterator[dict]:
        """The agent's history, oldest block first, a page at a time (each
        fetched as the loop reaches it): `{"blocks": [...], "nextCursor",
        "nextAfter"}`. `after`: the blocks after that number; `limit`:
        blocks a page (50 unless given)."""
        self._defined.result()
        params = c.query(after=after, limit=limit)
        while True:
            page = self._studio._request("GET", c.agent_path(self.name, "/history"), params=params)
            yield page
            if not page.get("nextCursor"):
                return
            params = c.query(cursor=page["nextCursor"], limit=limit)

    def context(self, *, at_block: int | None = None) -> dict:
        """Exactly what the agent's next model call would be given (with
        `at_block`: what that block's first model call was given)."""
        self._defined.result()
        return self._studio._request(
            "GET", c.agent_path(self.name, "/context"), params=c.query(atBlock=at_block)
        )

    def cost(self, turn) -> dict:
        """A turn's cost as charged now (`total` and `lines`): `turn` is a
        turn as `send` returned it, or its id."""
        self._defined.result()
        path = c.agent_path(self.name, f"/turns/{c.turn_id_of(turn)}")
        return self._studio._request("GET", path)["turn"]["cost"]

    def replay(
        self,
        *,
        from_block: int,
        definition: dict | None = None,
        through: int | None = None,
        on_progress: Callable[[dict], object] | None = None,
    ) -> dict:
        """Replays the player's messages of blocks `from_block`..`through`
        (None: the newest ended block) on a copy of the agent as it stood
        before them, with `definition`'s changes (any of `systemPrompt`,
        `model`, `memory`, `compaction`) made to its definition. Returns
        once the replay has ended (`status` `completed`, `failed` or
        `cancelled`), as the studio shows it: a row per block, the two
        stores compared. `on_progress(event)` is called, in this thread,
        with each `replay.progress` event as a block is played."""
        self._defined.result()
        studio = self._studio
        inbox: queue.SimpleQueue[dict] = queue.SimpleQueue()
        off = self.on("*", inbox.put)  # so it hears the replay's first block
        try:
            # Never sent twice: a second start would be refused (one replay
            # at a time) while the first one ran unheard.
            body = c.replay_body(from_block, definition, through)
            replay = studio._request(
                "POST", c.agent_path(self.name, "/replays"), json=body, repeatable=False
            )["replay"]
            followed = c.ReplayFollowed(replay)
            events: list[dict] = []
            while True:
                progress, ask = followed.heard(events)
                for event in progress:
                    if on_progress is not None:
                        on_progress(event)
                if ask:
                    followed.replay = studio._request("GET", followed.path)["replay"]
                wait = followed.wait()
                if wait is None:
                    return followed.replay
                try:
                    events = [inbox.get(timeout=wait)]
                except queue.Empty:
                    events = []
                    if followed.nothing_came():
                        followed.replay = studio._request("GET", followed.path)["replay"]
                    continue
                while not inbox.empty():
                    events.append(inbox.get_nowait())
        finally:
            off()

    def replays(self, *, limit: int | None = None, cursor: str | None = None) -> dict:
        """The agent's replays, newest first, a page: `{"replays": [...],
        "nextCursor"}`, each replay without its rows and stores."""
        self._defined.result()
        params = c.query(limit=limit, cursor=cursor)
        return self._studio._request("GET", c.agent_path(self.name, "/replays"), params=params)

    def replay_cancel(self, replay) -> dict:
        """Cancels a replay (`replay`: one as `replay`, `replays` or a
        `replay.progress` event's `replayId` gave it): a queued one ends at
        once, a running one once its current block has; the blocks played
        stay. Returns the replay as it stands. One that has ended already
        is a StudioError, 409 `replay_ended`."""
        self._defined.result()
        path = c.agent_path(self.name, f"/replays/{c.replay_id_of(replay)}/cancel")
        return self._studio._request("POST", path)["replay"]


class _ToolCalls:
    """The game's tool calls of one send: each run in a thread of its own,
    and answered from there, while the send's thread reads on."""

    def __init__(self, studio: Studio, agent: str, handlers: dict):
        self.studio, self.agent = studio, agent
        self.calls = c.ToolCalls(handlers, threading.Event)
        self.lock = threading.Lock()

    def heard(self, kind: str, event: dict) -> None:
        if kind == "tool.requested":
            self.requested(event)
        elif kind == "tool.answered":
            with self.lock:
                made = self.calls.answered(event)
            if made is not None:
                made.ctx.cancelled.set()

    def requested(self, call: dict) -> None:
        with self.lock:
            made = self.calls.requested(call)
        if made is not None:
            threading.Thread(
                target=self._run, args=(made,), name=f"studio-tool-{made.ctx.name}", daemon=True
            ).start()

    def end(self) -> None:
        with self.lock:
            left = self.calls.ended()
        for made in left:
            made.ctx.cancelled.set()

    def _run(self, made: c.ToolCall) -> None:
        name = made.ctx.name
        try:
            try:
                arguments = self._arguments(made)
                if arguments is c.NOT_WAITED_ON:
                    return  # answered elsewhere, or the turn ended
                answer = c.tool_answer(name, made.run(arguments or {}, made.ctx))
            except Exception as error:  # the model reads what went wrong
                answer = {"error": c.tool_error_text(name, error)}
            with self.lock:
                if made.ctx.cancelled.is_set():
                    return  # answered without it, or the turn ended
                made.posting = True
            self._answer(made, answer)
        finally:
            made.done = True

    def _arguments(self, made: c.ToolCall):
        """The call's arguments whole: read from its turn when the event cut them."""
        if not c.is_cut(made.call):
            return made.call.get("arguments")
        turn = self.studio._request("GET", c.turn_path(self.agent, made.ctx.turn_id))["turn"]
        return c.pending_arguments(turn, made.ctx.call_id)

    def _answer(self, made: c.ToolCall, answer: dict) -> None:
        path = c.tool_results_path(self.agent, made.ctx.turn_id)
        try:
            self.studio._request("POST", path, json={"callId": made.ctx.call_id, **answer})
        except StudioError as error:
            if error.status == 409:
                return  # answered already, or the turn ended
            if error.status in (400, 413) and "error" not in answer:
                # A result the studio will not keep: the model reads why, rather than wait for the deadline.
                self._answer(made, c.tool_refused(made.ctx.name, error))
                return
            c.log.warning(
                "the answer to %s (%s) could not be sent: %s", made.ctx.name, made.ctx.call_id, error
            )


class _Listener:
    """One agent's WebSocket, in a thread: hands each event to its
    handlers, and after a drop listens again from the last seq heard."""

    def __init__(self, studio: Studio, name: str):
        self.studio, self.name = studio, name
        self.handlers = c.Handlers()
        self.opened = threading.Event()  # the studio listens, or refused for good
        self.refusal: dict | None = None
        self._stopped = threading.Event()
        self._socket = None
        threading.Thread(target=self._run, name=f"studio-events-{name}", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        socket = self._socket
        if socket is not None:
            socket.close()

    def _run(self) -> None:
        tries = 0
        while not self._stopped.is_set():
            code = None
            try:
                url = c.events_url(self.studio.url, self.name, self.handlers.since)
                with ws_connect(
                    url, subprotocols=c.subprotocols(self.studio._key), open_timeout=self.studio.timeout
                ) as socket:
                    self._socket = socket
                    if self._stopped.is_set():
                        break
                    for message in socket:
                        event, handlers = self.handlers.heard(message)
                        if event.get("type") == "hello":
                            tries = 0
                            self.opened.set()
                        for handler in handlers:
                            _handed(handler, event)
                code = socket.close_code
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
            except Exception as failure:  # no socket: refused, cut, timed out, no studio there
                c.log.info("listening to %s's events failed: %r", self.name, failure)
                code = None
            finally:
                self._socket = None
            if self._stopped.is_set():
                break
            delay, error = self.handlers.closed(code, tries)
            if delay is None:
                self.refusal = error
                with self.studio._lock:
                    if self.studio._listeners.get(self.name) is self:
                        del self.studio._listeners[self.name]
                for handler in self.handlers.of("error"):
                    _handed(handler, error)
                self.opened.set()
                return
            tries += 1
            self._stopped.wait(delay)


def _handed(handler: Callable, event: dict) -> None:
    try:
        handler(event)
    except Exception:  # one handler's bug must not stop the agent's events
        c.log.exception("an event handler raised")
