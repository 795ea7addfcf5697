"""Every list of the API has one shape: `limit` and `cursor` in, the items
and `nextCursor` out. A walk page by page sees every item once, in order,
however many arrive meanwhile; a bad limit or cursor is a 400 that names
the parameter; the schema says all of it; and a page costs the same few
queries however long it is."""

import base64
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Compaction, CompactionReason, CompactionStatus, Replay, ReplayStatus
from billing import ledger
from tests.conftest import call, error_of, quest_checkpoint, script

DM = "/api/v1/agents/dm"
NEW_QUEST = call("close_memory", name="quest", description="d", content="c")


@dataclass
class Listing:
    path: str
    key: str  # where the items are in the answer, and the name its cursors carry
    ident: Callable[[dict], object]  # what tells two items apart
    add: Callable[[int], None]  # adds n items to the list


@pytest.fixture
def listings(api, agent, define, send, game):
    """Each list of the API, with a way to add items to it."""
    numbers = itertools.count()

    def sends(n):
        # Each send is a turn, a block and a cost line; the memory call on
        # every other one makes a second cost line, and a tool call to show.
        for _ in range(n):
            number = next(numbers)
            steps = [call("open_memory", name="nothing")] if number % 2 else []
            send(script(*steps, {"say": f"reply {number}"}))

    def memories(n):
        notes = [
            call("close_memory", name=f"note-{next(numbers)}", description="d", content="c") for _ in range(n)
        ]
        send(script(*notes))

    def agents(n):
        for _ in range(n):
            define(f"npc-{next(numbers):03d}")

    def compactions(n):
        for _ in range(n):
            checkpoint = quest_checkpoint(agent, through=0)
            Compaction.objects.create(
                agent=agent,
                reason=CompactionReason.MANUAL,
                status=CompactionStatus.DONE,
                checkpoint=checkpoint,
            )

    def checkpoints(n):
        for _ in range(n):
            quest_checkpoint(agent, through=0)

    def quest_changes(n):
        # Made closed, then opened and closed in turn: a change a call.
        store = {m["name"]: m for m in api.get(f"{DM}/memories").json()["memories"]}
        steps, is_open = ([], store["quest"]["open"]) if "quest" in store else ([NEW_QUEST], False)
        while len(steps) < n:
            steps.append(call("close_memory" if is_open else "open_memory", name="quest"))
            is_open = not is_open
        send(script(*steps))

    def replays(n):
        # As an ended replay is left: its record, its copy gone.
        for _ in range(n):
            Replay.objects.create(
                agent=agent,
                replay_agent_name=f"dm~replay-{next(numbers):010d}",
                from_block=1,
                through_block=1,
                status=ReplayStatus.COMPLETED,
                kept={"rows": {}, "cost": "0.000000", "store": [], "storeRefused": None},
            )

    def adjustments(n):
        for _ in range(n):
            ledger.adjustment_post(game=game, amount="1", reason=f"top-up {next(numbers)}", made_by="test")

    by_id = lambda item: item["id"]  # noqa: E731
    return {
        "agents": Listing("/api/v1/agents", "agents", lambda item: item["name"], agents),
        "turns": Listing(f"{DM}/turns", "turns", by_id, sends),
        "history": Listing(f"{DM}/history", "blocks", lambda item: item["block"], sends),
        "compactions": Listing(f"{DM}/compactions", "compactions", by_id, compactions),
        "memories": Listing(f"{DM}/memories", "memories", lambda item: item["name"], memories),
        "lines": Listing("/api/v1/billing/lines", "lines", by_id, sends),
        "adjustments": Listing("/api/v1/billing/adjustments", "adjustments", by_id, adjustments),
        "checkpoints": Listing(f"{DM}/checkpoints", "checkpoints", by_id, checkpoints),
        "replays": Listing(f"{DM}/replays", "replays", by_id, replays),
        "memory history": Listing(
            f"{DM}/memories/quest/history", "events", lambda item: item["at"], quest_changes
        ),
    }


LISTS = [
    "agents",
    "turns",
    "history",
    "compactions",
    "memories",
    "lines",
    "adjustments",
    "checkpoints",
    "replays",
    "memory history",
]


@pytest.fixture(params=LISTS)
def listing(request, listings) -> Listing:
    return listings[request.param]


def get(api, path, **params):
    response = api.get(f"{path}?{urlencode(params)}" if params else path)
    assert response.status_code == 200, response.content[:300]
    return response.json()


def everything(api, listing) -> list:
    body = get(api, listing.path, limit=1000)
    assert body["nextCursor"] is None
    return [listing.ident(item) for item in body[listing.key]]


def walk(api, listing, *, limit, between=lambda: None, **filters) -> list[list]:
    """The list page by page, following `nextCursor`; `between` runs after
    each page."""
    pages, params = [], {"limit": limit, **filters}
    while True:
        body = get(api, listing.path, **params)
        pages.append([listing.ident(item) for item in body[listing.key]])
        if body["nextCursor"] is None:
            return pages
        between()
        params["cursor"] = body["nextCursor"]


# --- walking ---------------------------------------------------------------------------


def test_walking_a_list_page_by_page_yields_every_item_once_in_order(api, listing):
    listing.add(5)
    expected = everything(api, listing)

    pages = walk(api, listing, limit=2)

    assert [item for page in pages for item in page] == expected
    assert [len(page) for page in pages[:-1]] == [2] * (len(pages) - 1)
    assert 1 <= len(pages[-1]) <= 2


def test_items_that_arrive_between_pages_are_neither_repeated_nor_make_one_skipped(api, listing):
    listing.add(5)
    before = everything(api, listing)

    seen = [item for page in walk(api, listing, limit=2, between=lambda: listing.add(1)) for item in page]

    after = everything(api, listing)
    assert len(after) > len(before)
    assert len(seen) == len(set(seen))
    assert set(before) <= set(seen)
    assert seen == [item for item in after if item in set(seen)]


def test_a_newest_first_list_walks_on_to_older_items_as_new_ones_arrive(api, listings):
    turns = listings["turns"]
    turns.add(4)
    before = everything(api, turns)

    seen = [item for page in walk(api, turns, limit=3, between=lambda: turns.add(2)) for item in page]

    assert seen == before


def test_history_walks_on_into_blocks_written_while_it_is_read(api, listings):
    history = listings["history"]
    history.add(3)

    seen = [item for page in walk(api, history, limit=2, between=lambda: history.add(1)) for item in page]

    assert seen == list(range(1, len(seen) + 1))
    assert len(seen) >= 4


def test_a_page_of_exactly_what_is_left_is_the_last(api, listing):
    listing.add(3)
    count = len(everything(api, listing))

    body = get(api, listing.path, limit=count)

    assert len(body[listing.key]) == count
    assert body["nextCursor"] is None


def test_a_filter_holds_on_every_page(api, listings):
    lines = listings["lines"]
    lines.add(6)  # three with a memory call, so three memory access lines
    fees = get(api, lines.path, kind="memory_access")["lines"]

    pages = walk(api, lines, limit=1, kind="memory_access")

    assert len(fees) == 3
    assert [item for page in pages for item in page] == [line["id"] for line in fees]


# --- the older ways to page keep working -------------------------------------------------


def test_history_answers_next_after_beside_next_cursor_and_takes_either(api, listings):
    listings["history"].add(3)

    first = get(api, f"{DM}/history", limit=2)
    by_after = get(api, f"{DM}/history", limit=2, after=first["nextAfter"])
    by_cursor = get(api, f"{DM}/history", limit=2, cursor=first["nextCursor"])

    assert first["nextAfter"] == 2
    assert by_after == by_cursor
    assert [b["block"] for b in by_cursor["blocks"]] == [3]
    assert (by_cursor["nextAfter"], by_cursor["nextCursor"]) == (None, None)


def test_lines_still_take_before(api, listings):
    listings["lines"].add(3)
    newest = get(api, "/api/v1/billing/lines", limit=1)

    by_before = get(api, "/api/v1/billing/lines", limit=1, before=newest["lines"][0]["id"])
    by_cursor = get(api, "/api/v1/billing/lines", limit=1, cursor=newest["nextCursor"])

    assert by_before == by_cursor
    assert by_cursor["lines"][0]["id"] < newest["lines"][0]["id"]


@pytest.mark.parametrize("path, old", [(f"{DM}/history", "after"), ("/api/v1/billing/lines", "before")])
def test_the_old_parameter_and_a_cursor_together_are_400(api, listings, path, old):
    listings["history"].add(3)
    cursor = get(api, path, limit=1)["nextCursor"]

    response = api.get(f"{path}?{urlencode({old: 1, 'cursor': cursor})}")

    assert response.status_code == 400
    assert error_of(response)["details"] == [
        {"field": old, "message": "cannot be given with `cursor`: pass one."}
    ]


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["0", "-1", "1001", "abc", "1.5", ""])
def test_a_bad_limit_is_400_naming_it(api, listing, limit):
    response = api.get(f"{listing.path}?limit={limit}")

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert [problem["field"] for problem in error["details"]] == ["limit"]
    assert error["message"] == f"limit: {error['details'][0]['message']}"


def cursor_of(text: str) -> str:
    """A cursor made the way the studio makes them, of any text."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def refused_cursor(response):
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert [problem["field"] for problem in error["details"]] == ["cursor"]


@pytest.mark.parametrize(
    "cursor", ["garbage", "é", "x" * 501, cursor_of('{"not": "a list"}'), cursor_of('["turns"]')]
)
def test_a_cursor_that_is_not_one_is_400_naming_it(api, listing, cursor):
    refused_cursor(api.get(f"{listing.path}?{urlencode({'cursor': cursor})}"))


@pytest.mark.parametrize(
    "key", ["-1", "9223372036854775808", "1e400", "true", "null", '""', '"\\u0000"', '"\\ud800"']
)
def test_a_cursor_of_the_list_at_no_possible_place_is_400(api, listing, key):
    cursor = cursor_of(f'["{listing.key}", {key}]')

    refused_cursor(api.get(f"{listing.path}?{urlencode({'cursor': cursor})}"))


def test_one_lists_cursor_is_refused_by_another(api, listings):
    listings["turns"].add(3)
    listings["compactions"].add(3)
    cursor = get(api, f"{DM}/turns", limit=1)["nextCursor"]

    response = api.get(f"{DM}/compactions?cursor={cursor}")

    assert response.status_code == 400
    assert error_of(response)["details"][0]["field"] == "cursor"


def test_an_unknown_query_parameter_is_400_naming_it(api, listing):
    response = api.get(f"{listing.path}?limt=5")

    assert response.status_code == 400
    assert error_of(response)["details"] == [{"field": "limt", "message": "is not a query parameter here"}]


# --- the schema ------------------------------------------------------------------------------


@pytest.fixture
def schema(client, db):
    return client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()


def _component(schema, ref: str) -> dict:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[1]]


def test_the_schema_documents_limit_cursor_and_next_cursor_for_every_list(schema, listings):
    for name, listing in listings.items():
        path = listing.path.replace(DM, "/api/v1/agents/{name}").replace("/quest/", "/{memory}/")
        operation = schema["paths"][path]["get"]
        params = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}
        answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
        fields = _component(schema, answer["$ref"])["properties"]

        assert params["limit"]["schema"]["minimum"] == 1, name
        assert params["limit"]["schema"]["maximum"] == 1000, name
        assert params["limit"]["schema"]["default"] >= 1, name
        assert params["cursor"]["schema"]["type"] == "string", name
        assert fields["nextCursor"] == {
            "type": "string",
            "nullable": True,
            "description": "Pass as `cursor` for the next page; null on the last page.",
        }, name
        assert fields[listing.key]["type"] == "array", name
        assert "400" in operation["responses"], name


def test_the_schema_documents_the_details_of_a_validation_error(schema):
    error = schema["components"]["schemas"]["ErrorDetail"]["properties"]
    problem = _component(schema, error["details"]["items"]["$ref"])

    assert set(problem["properties"]) == {"field", "message"}
    assert problem["properties"]["field"]["nullable"] is True


# --- queries -------------------------------------------------------------------------------


def test_a_list_reads_in_the_same_queries_however_long_its_page(api, listing, django_assert_max_num_queries):
    listing.add(2)
    with CaptureQueriesContext(connection) as short:
        count = len(get(api, listing.path, limit=1000)[listing.key])
    queries = len(short)  # now: the next request clears the log
    listing.add(6)

    with django_assert_max_num_queries(queries):
        body = get(api, listing.path, limit=1000)

    assert len(body[listing.key]) > count
