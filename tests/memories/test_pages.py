"""The Memories page: /studio/<game>/agents/<name>/memories/ — the store with
its budgets, each memory's history, and the live fragments."""

import re

import pytest
from django.db import transaction

from agents.services import AgentDefinition, agent_define
from memories import store
from memories.models import Memory
from memories.pages import diff_html
from memories.tools import tool_run
from tests.conftest import assert_sends_to_sign_in, with_query

QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}
NPCS = {"name": "npcs", "description": "Everyone Mara has met", "content": "The ferryman: wary."}


def run(agent, tool, **arguments):
    with transaction.atomic():
        result = tool_run(agent=agent, name=tool, arguments=arguments)
    assert not result.is_error, result.text
    return result


def url(agent, **query) -> str:
    return with_query(f"/studio/{agent.game.slug}/agents/{agent.name}/memories/", **query)


def row_of(html: str, name: str) -> str | None:
    """The opening tag of the store's row for memory `name`."""
    match = re.search(rf'<tr data-memory="{re.escape(name)}" data-open="(?:true|false)">', html)
    return match.group(0) if match else None


def history_of(html: str, name: str) -> str:
    """The card of memory `name`, from its opening tag to the next card."""
    start = html.index(f'data-memory-card="{name}"')
    end = html.find("data-memory-card=", start + 1)
    return html[start : end if end != -1 else len(html)]


@pytest.fixture
def browser(designer):
    """The client of a designer of the game (conftest's)."""
    return designer


@pytest.fixture
def quest_open_npcs_closed(agent):
    run(agent, "close_memory", **QUEST)
    run(agent, "close_memory", **NPCS)
    run(agent, "open_memory", name="quest")
    return agent


# --- who may see it ----------------------------------------------------------------------


def test_it_needs_a_signed_in_user(client, agent):
    assert_sends_to_sign_in(client, url(agent))


def test_it_is_404_for_someone_outside_the_game(outsider_client, agent):
    assert outsider_client.get(url(agent)).status_code == 404


def test_an_unknown_agent_is_404(browser, game):
    response = browser.get(f"/studio/{game.slug}/agents/nobody/memories/")

    assert response.status_code == 404


def test_another_games_agent_is_404_even_under_its_name(browser, other_game):
    agent_define(
        game=other_game, name="dm", definition=AgentDefinition(memory_enabled=True), by=None, via="command"
    )

    response = browser.get(f"/studio/{other_game.slug}/agents/dm/memories/")

    assert response.status_code == 404


# --- the store ----------------------------------------------------------------------------


def test_every_memory_row_carries_its_name_and_open_bit(browser, quest_open_npcs_closed):
    response = browser.get(url(quest_open_npcs_closed))

    assert response.status_code == 200
    html = response.content.decode()
    assert row_of(html, "quest") == '<tr data-memory="quest" data-open="true">'
    assert row_of(html, "npcs") == '<tr data-memory="npcs" data-open="false">'


def test_the_page_listens_on_the_agents_socket_and_says_it_is_read_only(browser, agent):
    html = browser.get(url(agent)).content.decode()

    assert f'data-live-socket="/ws/studio/{agent.game.slug}/agents/dm/"' in html
    assert "data-live-status" in html
    assert "only the agent (with its memory tools) and the compactor write memories" in html
    assert "<textarea" not in html and 'method="post"' not in html.split("</header>")[1]


def test_the_budgets_show_open_tokens_and_store_bytes_against_their_limits(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    html = browser.get(url(agent)).content.decode()

    open_tokens = store.open_tokens(agent)
    assert f'aria-valuenow="{open_tokens}"' in html
    assert f'<strong class="meter-value">{open_tokens}</strong> of 4,000' in html
    assert f'aria-valuenow="{store.store_bytes(agent)}"' in html
    assert 'aria-valuemax="1048576"' in html


def test_a_budget_past_80_percent_is_amber_and_past_100_red(browser, define):
    agent = define("dm", max_open_tokens=10)
    for name, content in (("quest", "one two three four five"), ("npcs", "six seven eight nine")):
        run(agent, "close_memory", name=name, description="Now", content=content)
        run(agent, "open_memory", name=name)  # 9 of 10 tokens in all

    assert 'class="bar-fill warn"' in browser.get(url(agent)).content.decode()

    # A redefinition lowers the budget under what is open (no memory is larger than it).
    define("dm", max_open_tokens=6)

    assert 'class="bar-fill over"' in browser.get(url(agent)).content.decode()


def test_an_agent_without_memories_is_told_how_it_gets_one(browser, agent):
    html = browser.get(url(agent)).content.decode()

    assert "No memories yet." in html
    assert "close_memory" in html
    assert "data-memory=" not in html


def test_an_agent_with_memory_off_is_told_how_to_turn_it_on(browser, define):
    agent = define("narrator", memory_enabled=False)

    html = browser.get(url(agent)).content.decode()

    assert "Memory is off for narrator." in html
    assert "<code>memory: {}</code>" in html
    assert "Give the agent memory tools" in html
    assert "PUT /api/v1/agents/narrator" in html


# --- each memory's history --------------------------------------------------------------------


def test_an_update_shows_what_changed_before_and_after(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    run(agent, "close_memory", name="quest", content="Find the silver key and open the house.")

    card = history_of(browser.get(url(agent)).content.decode(), "quest")

    assert (
        card.index('data-change="closed"')
        < card.index('data-change="updated"')
        < card.index('data-change="opened"')
        < card.index('data-change="created"')
    )  # newest first
    assert "Find the silver key<ins> and open the house</ins>." in card
    assert "Find the silver key." in card  # the full before
    assert "Find the silver key and open the house." in card  # and the full after
    assert "Rewritten with <code>close_memory</code>." in card
    assert "Closed by the <code>close_memory</code> call that saved the change below." in card
    assert "unchanged" not in card


def test_a_changed_description_is_shown_before_and_after(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    run(agent, "close_memory", name="quest", description="The player's goal")

    card = history_of(browser.get(url(agent)).content.decode(), "quest")

    assert "<del>What the player wants now</del> → <ins>The player&#x27;s goal</ins>" in card


def test_opening_and_closing_just_say_so(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    run(agent, "close_memory", name="quest")

    card = history_of(browser.get(url(agent)).content.decode(), "quest")

    assert "Closed with <code>close_memory</code>, unchanged." in card
    assert "Opened with <code>open_memory</code>" in card


def test_a_compactor_rewrite_and_a_dropped_one_are_told_apart(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    quest = Memory.objects.get(agent=agent, name="quest")
    read = {"memory_id": quest.pk, "version_read": quest.version}
    store.memory_rewrite_by_compactor(agent=agent, name="quest", **read, content="Key found.")
    store.memory_rewrite_by_compactor(agent=agent, name="quest", **read, content="Stale idea.")

    card = history_of(browser.get(url(agent)).content.decode(), "quest")

    assert 'data-change="dropped" data-by="compactor"' in card
    assert "the memory was written after the compactor read it" in card
    assert "<del>Key found</del> <ins>Stale idea</ins>." in card
    assert 'data-change="updated" data-by="compactor"' in card
    assert "Rewritten by the compactor" in card


def test_a_rewrite_dropped_for_a_hard_limit_shows_with_its_reason(browser, define):
    agent = define("tight", max_open_tokens=8, max_tokens=1000)
    run(agent, "close_memory", **QUEST)
    run(agent, "open_memory", name="quest")
    quest = Memory.objects.get(agent=agent, name="quest")
    too_long = "word" + " word" * 499  # 500 tokens: half of maxTokens

    store.memory_rewrite_by_compactor(
        agent=agent, name="quest", memory_id=quest.pk, version_read=quest.version, content=too_long
    )

    card = history_of(browser.get(url(agent)).content.decode(), "quest")
    assert 'data-change="dropped" data-by="compactor"' in card
    assert (
        "<strong>not applied</strong>: open memories would take 500 tokens, half of maxTokens (1,000) or more."
        in card
    )
    assert too_long in card  # what it proposed


def test_a_deleted_memory_keeps_its_history_under_deleted_memories(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    run(agent, "delete_memory", name="quest")

    html = browser.get(url(agent)).content.decode()

    assert row_of(html, "quest") is None
    deleted = html[html.index("Deleted memories") :]
    assert 'data-deleted-memory="quest"' in deleted
    assert 'data-change="deleted"' in deleted and 'data-change="created"' in deleted
    assert "Find the silver key." in deleted  # its last content


def test_a_long_history_shows_the_newest_and_links_to_all_of_it(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    for _ in range(12):
        run(agent, "close_memory", name="quest")
        run(agent, "open_memory", name="quest")  # 2 + 24 changes to quest in all

    card = history_of(browser.get(url(agent)).content.decode(), "quest")
    assert card.count('class="history-item') == 20
    assert "Show all 26 changes" in card

    focused = history_of(browser.get(url(agent, memory="quest")).content.decode(), "quest")
    assert focused.count('class="history-item') == 26


def test_memory_text_is_escaped(browser, agent):
    run(agent, "close_memory", name="quest", description="<b>bold</b>", content="<script>alert(1)</script>")

    html = browser.get(url(agent)).content.decode()

    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_page_takes_the_same_queries_for_many_memories(browser, agent, django_assert_max_num_queries):
    for index in range(2):
        run(agent, "close_memory", name=f"m{index}", description="d", content="c")
    with django_assert_max_num_queries(20) as few:
        browser.get(url(agent))
    queries = len(few.captured_queries)  # before requests reset the log
    for index in range(2, 8):
        run(agent, "close_memory", name=f"m{index}", description="d", content="c")
        run(agent, "open_memory", name=f"m{index}")

    with django_assert_max_num_queries(queries):
        browser.get(url(agent))


def many_memories(agent, count: int, *, deleted: int = 0) -> None:
    """`count` memories in the store, oldest first m000, m001…, and
    `deleted` more that were deleted (written straight in: the tools would
    take a transaction each)."""
    from memories.models import MemoryEvent

    names = [f"m{index:03}" for index in range(count + deleted)]
    Memory.objects.bulk_create(
        Memory(agent=agent, name=name, description="d", content="c", tokens=1, bytes=3)
        for name in names[:count]
    )
    MemoryEvent.objects.bulk_create(
        MemoryEvent(agent=agent, name=name, change="deleted", by="agent", before={"content": "c"})
        for name in names[count:]
    )


def test_a_large_store_is_shown_a_page_at_a_time(browser, agent):
    many_memories(agent, 250)

    first = browser.get(url(agent)).content.decode()
    third = browser.get(url(agent, page=3)).content.decode()

    assert first.count("<tr data-memory=") == 100 and first.count("data-memory-card=") == 100
    assert row_of(first, "m000") and row_of(first, "m099") and not row_of(first, "m100")
    assert "Memories 1–100 of 250" in first and "?page=2" in first
    assert third.count("<tr data-memory=") == 50 and row_of(third, "m249")
    assert "Memories 201–250 of 250" in third and "?page=2" in third and "?page=4" not in third
    assert '<div class="stat">250</div>' in first


def test_a_memory_asked_for_is_shown_whatever_its_page(browser, agent):
    many_memories(agent, 150)

    html = browser.get(url(agent, memory="m140")).content.decode()

    assert 'data-memory-card="m140"' in html


def test_a_memory_asked_for_by_its_name_typed_the_other_way_is_shown(browser, agent):
    many_memories(agent, 150)  # café is on the second page
    run(agent, "close_memory", name="caf\u00e9", description="Where they meet", content="The inn.")

    html = browser.get(url(agent, memory="cafe\u0301")).content.decode()  # decomposed: e and its accent

    assert 'data-memory-card="caf\u00e9"' in html


def test_deleted_memories_are_shown_the_newest_hundred(browser, agent):
    many_memories(agent, 1, deleted=150)

    html = browser.get(url(agent)).content.decode()

    assert html.count("data-deleted-memory=") == 100
    assert 'data-deleted-memory="m150"' in html and 'data-deleted-memory="m050"' not in html
    assert "The newest 100 of 150 deleted memories" in html


# --- live fragments ---------------------------------------------------------------------------


@pytest.mark.parametrize("fragment", ["budgets", "store", "memories"])
def test_each_fragment_renders_on_its_own(browser, quest_open_npcs_closed, fragment):
    response = browser.get(url(quest_open_npcs_closed, fragment=fragment))

    assert response.status_code == 200
    html = response.content.decode().strip()
    assert f'data-live-fragment="{fragment}"' in html.split(">")[0]
    assert "memory.changed checkpoint.written turn.finished" in html.split(">")[0]
    assert "<html" not in html


def test_the_store_fragment_has_the_row_hooks(browser, quest_open_npcs_closed):
    html = browser.get(url(quest_open_npcs_closed, fragment="store")).content.decode()

    assert row_of(html, "quest") == '<tr data-memory="quest" data-open="true">'


def test_an_unknown_fragment_is_404(browser, agent):
    assert browser.get(url(agent, fragment="nope")).status_code == 404


# --- the diff ---------------------------------------------------------------------------------


def test_the_diff_marks_words_removed_and_added_and_escapes_them():
    html = diff_html("The <ferryman> is wary.", "The <ferryman> is friendly.")

    assert html == "The &lt;ferryman&gt; is <del>wary</del> <ins>friendly</ins>."


def test_the_diff_shortens_long_unchanged_text_to_the_edges():
    same = "word " * 200
    html = diff_html(same + "old", same + "new")

    assert len(html) < 400
    assert 'class="diff-gap"' in html
    assert html.endswith("<del>old</del> <ins>new</ins>")


def test_opening_a_memory_is_not_taken_for_writing_it(browser, quest_open_npcs_closed):
    agent = quest_open_npcs_closed
    quest = Memory.objects.get(agent=agent, name="quest")
    store.memory_rewrite_by_compactor(
        agent=agent, name="quest", memory_id=quest.pk, version_read=quest.version, content="Key found."
    )
    run(agent, "close_memory", name="quest")
    run(agent, "open_memory", name="quest")  # the agent opens what the compactor wrote

    html = browser.get(url(agent, fragment="store")).content.decode()

    row = html[html.index('data-memory="quest"') : html.index("</tr>", html.index('data-memory="quest"'))]
    assert '<span class="badge badge-compactor">compactor</span>' in row


def test_a_long_history_shows_its_newest_diffs_in_the_same_queries(
    browser, agent, django_assert_max_num_queries
):
    def rewrite(version: int) -> None:
        run(agent, "open_memory", name="quest")
        run(agent, "close_memory", name="quest", description="d", content=f"Version {version}.")

    run(agent, "close_memory", name="quest", description="d", content="Version 0.")
    for version in range(1, 4):
        rewrite(version)
    with django_assert_max_num_queries(30) as few:
        browser.get(url(agent))
    queries = len(few.captured_queries)
    for version in range(4, 40):
        rewrite(version)

    with django_assert_max_num_queries(queries):
        html = browser.get(url(agent)).content.decode()

    diffs = history_of(html, "quest").count('class="text compact diff"')
    assert 0 < diffs <= 20  # of the newest changes; all of them are a link away
