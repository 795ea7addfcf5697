"""The Python client (`clients/python`, `studio_client`) against a real
studio: Daphne on this run's PostgreSQL and Redis, the `scripted` model as
its default model. The spec's examples in Python — the definition-time
throw and its two fixes, the prompt example, a send that writes a memory, a
transient send, a streamed reply, events with a reconnect in the middle —
then retries (the same turn for the same Idempotency-Key, a reply lost on
the way, a 429 waited out), replays, and the asyncio twin.

Network faults come from a TCP proxy between the client and the studio
(`Proxy`), which can cut its connections and refuse new ones."""

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from studio_client import StudioError, connect, connect_async

from bench.launcher import free_port
from studio.auth.keys import apikey_prefix_of, apikey_revoke
from tests.support.web import start_web, stop_web

from ..conftest import UNTIL_CANCELLED, call, script, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the servers it starts take this run's Redis"),
    pytest.mark.usefixtures("event_buffers_cleared", "stream_slots_cleared"),
]

PROMPT = "You are the dungeon master. Keep the story straight."
ROOT = Path(__file__).resolve().parents[2]


class Studio:
    """The studio's web process, and its access log (one line a request)."""

    def __init__(self, logs):
        self.processes, (self.url,) = start_web(
            logs,
            1,
            STUDIO_DEFAULT_MODEL="scripted",
            # One live turn a game: a second send at once is refused with
            # 429 game_busy and Retry-After, which the client waits out.
            STUDIO_MAX_LIVE_TURNS_PER_GAME="1",
            STUDIO_COMPACTION_RUNNER="thread",  # replays run in the background, as a worker would run them
            PYTHONUNBUFFERED="1",  # the access log as it is written
        )
        self.log = logs / "web0.log"

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of each request answered so far."""
        lines = self.log.read_text(errors="replace")
        return [(m, p, int(s)) for m, p, s in re.findall(r'"([A-Z]+) (\S+)" (\d{3})', lines)]


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    studio = Studio(tmp_path_factory.mktemp("web"))
    yield studio
    stop_web(studio.processes)


@pytest.fixture
def io(web, designer_key):
    with connect(web.url, designer_key) as io:
        yield io


def test_the_definition_time_rule_throws_at_construction_in_the_studios_words(io, web, designer_key):
    options = {"memory": {}, "compaction": {"type": "summarize", "maxTokens": 8000}}

    # Throws at definition time: 4000 is not below 8000 / 2.
    with pytest.raises(StudioError) as thrown:
        io.Agent("dm", options)

    studio_says = httpx.put(f"{web.url}/api/v1/agents/dm", json=options, headers=bearer(designer_key))
    assert studio_says.status_code == 400
    error = studio_says.json()["error"]
    assert (thrown.value.status, thrown.value.code, thrown.value.message) == (
        400,
        error["code"],
        error["message"],
    )
    assert "(4,000)" in thrown.value.message and "(8,000)" in thrown.value.message
    assert studio_says.status_code == 400  # and nothing was defined:
    assert (
        io.billing()
        and not httpx.get(f"{web.url}/api/v1/agents", headers=bearer(designer_key)).json()["agents"]
    )


def test_either_fix_defines_the_agent(io):
    # Either give the agent more room…
    roomy = io.Agent("dm", {"memory": {}, "compaction": {"type": "summarize", "maxTokens": 16000}})
    assert roomy.ready["compaction"] == {"type": "summarize", "maxTokens": 16000}
    assert roomy.ready["memory"] == {"maxOpenTokens": 4000}

    # …or take less of it for memories.
    frugal = io.Agent(
        "dm", {"memory": {"maxOpenTokens": 1000}, "compaction": {"type": "summarize", "maxTokens": 8000}}
    )
    assert frugal.ready["memory"] == {"maxOpenTokens": 1000}
    assert frugal.ready["compaction"]["maxTokens"] == 8000


def test_the_prompt_example_and_constructing_again(io, web):
    before = len(web.requests())
    io.agents.dm = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})

    assert io.agents.dm.ready["systemPrompt"] == PROMPT
    assert io.agents.dm.ready["model"] == "scripted"  # the studio's default model
    context = io.agents.dm.context()
    assert context["system"].startswith(PROMPT)
    assert context["tools"] == ["open_memory", "close_memory", "delete_memory"]

    # Safe to construct at the top of every event handler: the same options send nothing…
    again = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})
    assert again.ready == io.agents.dm.ready
    # …other options send one PUT.
    changed = io.Agent("dm", {"systemPrompt": PROMPT + " Be brief.", "memory": {}})
    assert changed.ready["systemPrompt"] == PROMPT + " Be brief."

    io.billing()  # a request after them all, to find in the log
    wait_for(lambda: ("GET", "/api/v1/billing", 200) in web.requests()[before:])
    puts = [r for r in web.requests()[before:] if r[0] == "PUT"]
    assert puts == [("PUT", "/api/v1/agents/dm", 201), ("PUT", "/api/v1/agents/dm", 200)]


def test_a_send_that_writes_a_memory(io):
    dm = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})
    balance = io.billing()["balance"]

    turn = dm.send(
        script(
            call(
                "close_memory",
                name="quest",
                description="What the player is after",
                content="The silver key.",
            ),
            {"say": "Noted."},
        )
    )

    assert (turn["status"], turn["reply"], turn["block"]) == ("completed", "Noted.", 1)
    assert [(c["name"], c["isError"]) for c in turn["toolCalls"]] == [("close_memory", False)]
    store = dm.memories()
    assert [(m["name"], m["content"], m["open"]) for m in store["memories"]] == [
        ("quest", "The silver key.", False)
    ]
    assert store["maxOpenTokens"] == 4000
    cost = dm.cost(turn)
    assert [line["kind"] for line in cost["lines"]] == ["model", "memory_access"]
    assert cost == turn["cost"]
    assert dm.cost(turn["id"]) == cost
    [page] = list(dm.history())
    [block] = page["blocks"]
    assert [e["type"] for e in block["entries"]] == ["message", "tool_call", "message"]
    assert float(io.billing()["balance"]) < float(balance)


def test_a_transient_send_leaves_no_trace_and_gets_no_memory_tools(io):
    dm = io.Agent("dm", {"memory": {}})

    turn = dm.send(
        script(call("close_memory", name="secret", description="d", content="c"), {"say": "Hm."}),
        transient=True,
    )

    assert (turn["status"], turn["transient"], turn["block"], turn["reply"]) == (
        "completed",
        True,
        None,
        "Hm.",
    )
    assert turn["toolCalls"] == []
    assert dm.memories()["memories"] == []
    assert [page["blocks"] for page in dm.history()] == [[]]


def test_a_streamed_reply_comes_a_piece_at_a_time(io):
    dm = io.Agent("dm", {"memory": {}})
    pieces = []

    turn = dm.send(script({"say": "The bells ring at dusk.", "sleep": 0.2}), on_text=pieces.append)

    assert turn["status"] == "completed"
    assert "".join(pieces) == turn["reply"] == "The bells ring at dusk."
    assert len(pieces) > 1


def test_history_comes_a_page_at_a_time(io):
    dm = io.Agent("dm", {})
    for i in range(5):
        dm.send(f"line {i}")

    pages = list(dm.history(limit=2))

    assert [[b["block"] for b in page["blocks"]] for page in pages] == [[1, 2], [3, 4], [5]]
    assert [[b["block"] for b in page["blocks"]] for page in dm.history(after=3)] == [[4, 5]]


def test_events_with_a_reconnect_in_the_middle_lose_and_repeat_nothing(web, designer_key, io):
    dm = io.Agent("dm", {"memory": {}})
    assert dm.ready
    heard, errors = [], []
    with Proxy(web.url) as proxy, connect(proxy.url, designer_key) as listening:
        off = listening.Agent("dm", {"memory": {}}).on("*", heard.append)
        listening.Agent("dm", {"memory": {}}).on("error", errors.append)
        first = dm.send("I open the chapel door.")
        wait_for(lambda: finished(heard) == [first["id"]])

        proxy.refuse()  # the network goes: the listener's socket breaks, and it cannot come back
        second = dm.send(script(call("close_memory", name="quest", description="d", content="c")))
        proxy.accept()  # back: the listener listens again from the last seq it heard
        wait_for(lambda: finished(heard) == [first["id"], second["id"]], timeout=30)
        third = dm.send("I ring the bell.")
        wait_for(lambda: finished(heard) == [first["id"], second["id"], third["id"]])
        off()

    assert proxy.connections >= 2  # it did listen again
    seqs = [event["seq"] for event in heard]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # none lost, none twice
    assert [e["type"] for e in heard if e.get("turnId") == second["id"]] == [
        "turn.started",
        "memory.changed",
        "tool_call",
        "reply.delta",
        "turn.finished",
    ]
    assert errors == []


def finished(events: list[dict]) -> list[str]:
    return [event["turnId"] for event in events if event["type"] == "turn.finished"]


def test_a_retry_with_the_same_idempotency_key_gives_the_same_turn(io):
    dm = io.Agent("dm", {"memory": {}})

    first = dm.send("I light a torch.", idempotency_key="torch-1")
    again = dm.send("I light a torch.", idempotency_key="torch-1")

    assert again["id"] == first["id"]
    assert [b["block"] for page in dm.history() for b in page["blocks"]] == [1]


def test_a_reply_lost_on_the_way_is_asked_again_and_runs_no_second_turn(web, designer_key):
    with Proxy(web.url) as proxy, connect(proxy.url, designer_key) as io:
        dm = io.Agent("dm", {"memory": {}})
        assert dm.ready
        proxy.cut_at(b'"turn"', forward=False)  # the answer to the send never arrives

        turn = dm.send("I pull the lever.")

        assert proxy.cut_done
        assert turn["status"] == "completed"
        assert [b["turnId"] for page in dm.history() for b in page["blocks"]] == [turn["id"]]


def test_a_stream_cut_in_the_middle_is_followed_again_without_repeating_a_piece(web, designer_key):
    with Proxy(web.url) as proxy, connect(proxy.url, designer_key) as io:
        dm = io.Agent("dm", {"memory": {}})
        assert dm.ready
        proxy.cut_at(b"event: reply.delta")  # after the first piece
        pieces = []

        turn = dm.send(script({"say": "Down the well you go.", "sleep": 0.2}), on_text=pieces.append)

        assert proxy.cut_done
        assert "".join(pieces) == turn["reply"] == "Down the well you go."
        assert [b["turnId"] for page in dm.history() for b in page["blocks"]] == [turn["id"]]


def test_a_429_is_waited_out_as_retry_after_says(io, web, designer_key):
    key = designer_key
    slow, quick = io.Agent("slow", {}), io.Agent("quick", {})
    assert slow.ready and quick.ready
    box = {}
    sending = threading.Thread(
        target=lambda: box.update(turn=slow.send(script({"sleep": 2}, {"say": "Done."})))
    )
    sending.start()
    wait_for(
        lambda: httpx.get(f"{web.url}/api/v1/agents/slow/turns?status=running", headers=bearer(key)).json()[
            "turns"
        ]
    )

    turn = quick.send("Am I next?")
    sending.join(30)

    assert turn["status"] == box["turn"]["status"] == "completed"
    assert box["turn"]["endedAt"] <= turn["createdAt"]
    statuses = [status for method, path, status in web.requests() if path == "/api/v1/agents/quick/messages"]
    assert statuses[0] == 429 and statuses[-1] == 200


def test_a_refusal_is_one_studio_error(io):
    with pytest.raises(StudioError) as bad_name:
        assert io.Agent("no such agent!", {}).ready
    with pytest.raises(StudioError) as misspelt:
        assert io.Agent("dm", systemprompt="You are the dungeon master.").ready

    assert (bad_name.value.status, bad_name.value.code, bad_name.value.retry_after) == (
        400,
        "invalid_name",
        None,
    )
    assert (misspelt.value.code, [d["field"] for d in misspelt.value.details]) == (
        "invalid_definition",
        ["systemprompt"],
    )


def test_no_studio_there_is_a_network_error_once_the_retries_are_spent():
    with connect(f"http://127.0.0.1:{free_port()}", "sk_none", retries=1) as io:
        with pytest.raises(StudioError) as unreached:
            assert io.Agent("dm", {}).ready

    assert (unreached.value.status, unreached.value.code) == (None, "network_error")


def test_listening_with_a_revoked_key_is_refused_for_good(io, designer_key):
    dm = io.Agent("dm", {})
    assert dm.ready
    apikey_revoke(prefix=apikey_prefix_of(designer_key))
    errors = []

    with pytest.raises(StudioError) as refused:
        dm.on("error", errors.append)

    assert (refused.value.status, refused.value.code) == (None, "unauthenticated")
    assert [(e["code"], e["closeCode"]) for e in errors] == [("unauthenticated", 4401)]


async def test_the_async_client_makes_the_same_calls(web, designer_key):
    async with connect_async(web.url, designer_key) as io:
        with pytest.raises(StudioError) as thrown:
            io.Agent("dm", {"memory": {}, "compaction": {"type": "summarize", "maxTokens": 8000}})
        assert thrown.value.code == "invalid_definition"

        io.agents.dm = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})
        assert (await io.agents.dm.ready)["systemPrompt"] == PROMPT
        heard, done = [], asyncio.Event()

        async def on_finished(event):
            heard.append(event)
            done.set()

        off = await io.agents.dm.on("turn.finished", on_finished)
        pieces = []
        turn = await io.agents.dm.send(
            script(
                call("close_memory", name="quest", description="d", content="The key."),
                {"say": "Noted, then.", "sleep": 0.1},
            ),
            on_text=pieces.append,
        )
        await asyncio.wait_for(done.wait(), 30)
        off()

        assert "".join(pieces) == turn["reply"] == "Noted, then."
        assert [e["turnId"] for e in heard] == [turn["id"]]
        assert [m["name"] for m in (await io.agents.dm.memories())["memories"]] == ["quest"]
        assert [line["kind"] for line in (await io.agents.dm.cost(turn))["lines"]] == [
            "model",
            "memory_access",
        ]
        assert [b["block"] async for page in io.agents.dm.history() for b in page["blocks"]] == [1]
        assert (await io.agents.dm.context())["tools"] == ["open_memory", "close_memory", "delete_memory"]
        transient = await io.agents.dm.send("psst", transient=True, idempotency_key="psst-1")
        assert transient["block"] is None
        assert (await io.agents.dm.send("psst", transient=True, idempotency_key="psst-1"))["id"] == transient[
            "id"
        ]
        assert "balance" in await io.billing()


async def test_the_async_listener_listens_again_after_a_drop(web, designer_key, io):
    dm = io.Agent("dm", {})
    assert dm.ready
    heard = []
    with Proxy(web.url) as proxy:
        async with connect_async(proxy.url, designer_key) as listening:
            off = await listening.Agent("dm", {}).on("turn.finished", heard.append)
            first = await asyncio.to_thread(dm.send, "I knock.")
            await until(lambda: len(heard) == 1)
            proxy.refuse()
            second = await asyncio.to_thread(dm.send, "I knock again.")
            proxy.accept()
            await until(lambda: len(heard) == 2)
            off()

    assert proxy.connections >= 2
    assert [event["turnId"] for event in heard] == [first["id"], second["id"]]


async def until(condition, timeout=30.0):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def test_the_game_loop_example_plays(web, designer_key):
    played = subprocess.run(
        [sys.executable, "examples/python_game_loop.py"],
        input="I open the chapel door.\n/aside Is anyone there?\n/memories\n/quit\n",
        env={**os.environ, "STUDIO_URL": web.url, "STUDIO_KEY": designer_key},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert played.returncode == 0, played.stdout + played.stderr
    assert 'You said: "I open the chapel door."\n' in played.stdout
    assert 'You said: "Is anyone there?"\n' in played.stdout


# --- replays --------------------------------------------------------------------------------

QUEST = call("close_memory", name="quest", description="Now", content="Find the silver key.")
MESSAGES = ["I open the chapel door.", script(QUEST, {"say": "Noted."}), "I ring the bell."]
FORGETFUL = {"systemPrompt": "You are a forgetful dungeon master."}


def test_a_replay_with_a_changed_prompt_returns_a_row_per_block_each_block_heard(io, web, designer_key):
    dm = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})
    turns = [dm.send(message) for message in MESSAGES]
    heard = []

    replay = dm.replay(from_block=1, definition=FORGETFUL, on_progress=heard.append)

    assert replay["status"] == "completed"
    assert (replay["fromBlock"], replay["through"], replay["definition"]) == (1, 3, FORGETFUL)
    assert replay["progress"] == {"played": 3, "total": 3}
    assert [
        (r["block"], r["message"], r["original"]["reply"], r["replay"]["reply"]) for r in replay["rows"]
    ] == [
        (number, message, turn["reply"], turn["reply"])  # the scripted model reads no prompt
        for number, message, turn in zip((1, 2, 3), MESSAGES, turns, strict=True)
    ]
    assert [(e["type"], e["replayId"], e["block"], e["played"], e["total"]) for e in heard] == [
        ("replay.progress", replay["id"], number, number, 3) for number in (1, 2, 3)
    ]
    shown = httpx.get(f"{web.url}/api/v1/agents/dm/replays/{replay['id']}", headers=bearer(designer_key))
    assert replay == shown.json()["replay"]
    listed = dm.replays()
    assert [(r["id"], r["status"]) for r in listed["replays"]] == [(replay["id"], "completed")]
    assert listed["nextCursor"] is None and "rows" not in listed["replays"][0]


def test_a_second_replay_while_one_runs_is_the_studios_409_and_the_first_can_be_cancelled(
    io, web, designer_key
):
    dm = io.Agent("dm", {"memory": {}})
    dm.send("Hello.")
    # Block 2 sleeps, and so does its replay, until it is cancelled.
    sleeping = threading.Thread(target=dm.send, args=(script(UNTIL_CANCELLED, {"say": "Late."}),))
    sleeping.start()
    turns = f"{web.url}/api/v1/agents/dm/turns"
    wait_for(lambda: httpx.get(f"{turns}?status=running", headers=bearer(designer_key)).json()["turns"])
    running = httpx.get(f"{turns}?status=running", headers=bearer(designer_key)).json()["turns"][0]
    httpx.post(f"{turns}/{running['id']}/cancel", headers=bearer(designer_key))
    sleeping.join(30)
    heard, box = [], {}
    replaying = threading.Thread(
        target=lambda: box.update(replay=dm.replay(from_block=1, on_progress=heard.append))
    )
    replaying.start()
    wait_for(lambda: len(heard) == 1, timeout=30)  # block 1 played: the replay is on block 2

    with pytest.raises(StudioError) as refused:
        dm.replay(from_block=2)
    cancelled = dm.replay_cancel(heard[0]["replayId"])
    replaying.join(30)

    assert (refused.value.status, refused.value.code) == (409, "replay_running")
    assert cancelled["id"] == heard[0]["replayId"]
    replay = box["replay"]
    assert (replay["id"], replay["status"]) == (heard[0]["replayId"], "cancelled")
    assert [row["replay"]["status"] for row in replay["rows"]] == ["completed", "cancelled"]
    with pytest.raises(StudioError) as ended:
        dm.replay_cancel(replay)
    assert (ended.value.status, ended.value.code) == (409, "replay_ended")


def test_without_an_event_stream_the_replay_is_still_followed_to_its_end(web, designer_key):
    with Proxy(web.url) as proxy, connect(proxy.url, designer_key) as io:
        dm = io.Agent("dm", {"memory": {}})
        for message in MESSAGES:
            dm.send(message)
        proxy.refuse_websockets()
        heard = []

        replay = dm.replay(from_block=2, on_progress=heard.append)

    assert replay["status"] == "completed"
    assert [(r["block"], r["sameReply"], r["sameToolCalls"]) for r in replay["rows"]] == [
        (2, True, True),
        (3, True, True),
    ]
    assert heard == []


def test_a_replay_start_whose_answer_is_lost_is_not_sent_again(web, designer_key):
    with Proxy(web.url) as proxy, connect(proxy.url, designer_key) as io:
        dm = io.Agent("dm", {})
        dm.send("One.")
        before = len(web.requests())
        proxy.cut_at(b'{"replay"', forward=False)  # the answer to the start never arrives

        with pytest.raises(StudioError) as lost:
            dm.replay(from_block=1)

        assert proxy.cut_done
        assert (lost.value.status, lost.value.code) == (None, "network_error")
        assert "may or may not have been carried out" in lost.value.message
        assert len(dm.replays()["replays"]) == 1  # it did start, once
        wait_for(lambda: dm.replays()["replays"][0]["status"] == "completed", timeout=30)
    starts = [r for r in web.requests()[before:] if r[:2] == ("POST", "/api/v1/agents/dm/replays")]
    assert len(starts) == 1


async def test_the_async_client_replays_too(web, designer_key):
    async with connect_async(web.url, designer_key) as io:
        dm = io.Agent("dm", {"systemPrompt": PROMPT, "memory": {}})
        for message in MESSAGES:
            await dm.send(message)
        heard = []

        async def on_progress(event):
            heard.append(event["block"])

        replay = await dm.replay(from_block=2, through=3, definition=FORGETFUL, on_progress=on_progress)

        assert (replay["status"], replay["definition"]) == ("completed", FORGETFUL)
        assert [row["block"] for row in replay["rows"]] == heard == [2, 3]
        assert [r["id"] for r in (await dm.replays())["replays"]] == [replay["id"]]
        with pytest.raises(StudioError) as ended:
            await dm.replay_cancel(replay)
        assert ended.value.code == "replay_ended"


# --- the network's faults ----------------------------------------------------------------


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of the studio at `url`. `refuse()`
    cuts every connection and closes each new one at once, until
    `accept()`; `refuse_websockets()` closes each connection that asks for
    a WebSocket; `cut_at(marker)` cuts the connection the next time the
    studio's bytes hold `marker` (after passing them on, or not)."""

    def __init__(self, url: str):
        self.target = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections, self.refusing, self.pairs = 0, False, set()
        self.marker, self.forward, self.cut_done = None, True, False
        self.no_websockets = False
        self.lock = threading.Lock()
        threading.Thread(target=self._accepting, daemon=True).start()

    def refuse(self):
        self.refusing = True
        for pair in list(self.pairs):
            self._close(pair)

    def accept(self):
        self.refusing = False

    def refuse_websockets(self):
        self.no_websockets = True

    def cut_at(self, marker: bytes, forward: bool = True):
        self.marker, self.forward, self.cut_done = marker, forward, False

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.listener.close()
        self.refuse()

    def _accepting(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            self.connections += 1
            pair = (client, socket.create_connection(self.target))
            self.pairs.add(pair)
            threading.Thread(target=self._pump, args=(pair, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, True), daemon=True).start()

    def _pump(self, pair, from_studio: bool):
        source, sink = (pair[1], pair[0]) if from_studio else pair
        try:
            while data := source.recv(65536):
                if not from_studio and self.no_websockets and b"upgrade: websocket" in data.lower():
                    break
                with self.lock:
                    cut = from_studio and self.marker is not None and self.marker in data
                    if cut:
                        self.marker, self.cut_done = None, True
                if not cut or self.forward:
                    sink.sendall(data)
                if cut:
                    break
        except OSError:
            pass
        self._close(pair)

    def _close(self, pair):
        self.pairs.discard(pair)
        for end in pair:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()
