"""The Agents surface through Django's test client: who may see it, the
config forms, the page and its live fragments, and the actions it posts
(send, cancel, compact)."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Agent, Block, Turn, TurnStatus
from agents.pages.view_models import HISTORY_PAGE_SIZE
from agents.sending.context import context_assemble
from billing.models import Account
from studio.auth.throttles import send_window, window_clear
from tests.conftest import UNTIL_CANCELLED, call, error_of, in_thread, page_user, script, wait_for
from tests.support.pages import CONFIG, html
from tests.support.sending import turn_send

LIST = "/studio/ashmere/agents/"
PAGE = "/studio/ashmere/agents/dm/"
SEND = PAGE + "send/"
COMPACT = PAGE + "compact/"
FRAGMENTS = ["stats", "context", "checkpoint", "compactions", "history"]
QUEST = {"name": "quest", "description": "What the player wants now", "content": "Find the silver key."}


def cancel_url(turn) -> str:
    return f"{PAGE}turns/{turn.uuid}/cancel/"


# --- who may see it -------------------------------------------------------------------------


@pytest.mark.parametrize("url", [LIST, PAGE, PAGE + "?fragment=history"])
def test_it_sends_anonymous_visitors_to_sign_in(client, agent, url):
    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"].startswith("/studio/login/?next=")


@pytest.mark.parametrize("url", [LIST, PAGE, PAGE + "?fragment=context"])
def test_it_is_404_for_someone_outside_the_game(outsider_client, agent, url):
    assert outsider_client.get(url).status_code == 404


@pytest.mark.parametrize("url", [SEND, COMPACT])
def test_its_actions_are_404_for_someone_outside_the_game(outsider_client, agent, url):
    response = outsider_client.post(url, {"content": "hello"})

    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert Turn.objects.count() == 0


def test_an_outsider_cannot_post_a_config(outsider_client, agent):
    response = outsider_client.post(PAGE, CONFIG)

    assert response.status_code == 404
    agent.refresh_from_db()
    assert agent.max_tokens == 32000


def test_an_unknown_agent_is_404(designer, agent):
    assert designer.get("/studio/ashmere/agents/nobody/").status_code == 404
    assert designer.post("/studio/ashmere/agents/nobody/send/", {"content": "hi"}).status_code == 404


def test_its_actions_tell_an_anonymous_caller_to_sign_in(client, agent):
    response = client.post(SEND, {"content": "hello"})

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"


@pytest.mark.parametrize("url", [SEND, COMPACT])
def test_its_actions_are_post_only(designer, agent, url):
    response = designer.get(url)

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


@pytest.mark.parametrize("url", [LIST, PAGE])
def test_the_pages_take_only_get_and_post(designer, agent, url):
    assert designer.put(url).status_code == 405
    assert designer.delete(url).status_code == 405


def test_every_post_needs_the_csrf_token(game, agent):
    client = Client(enforce_csrf_checks=True)
    client.force_login(page_user("mara", game))

    assert client.post(SEND, {"content": "hello"}).status_code == 403
    assert client.post(PAGE, CONFIG).status_code == 403
    assert Turn.objects.count() == 0


# --- the list ----------------------------------------------------------------------------------


def test_the_list_says_how_to_create_the_first_agent(designer, game):
    page = html(designer.get(LIST))

    assert "No agents yet" in page
    assert "PUT /api/v1/agents/dm" in page
    assert 'id="new-agent"' in page


def test_the_list_shows_each_agent_with_its_config_and_stats(designer, define):
    define("dm", max_open_tokens=1000, max_tokens=8000)
    define("innkeeper", memory_enabled=False, compaction_type="sliding-window")
    turn_send(agent=Agent.objects.get(name="dm"), content=script(call("close_memory", **QUEST)))

    page = html(designer.get(LIST))

    dm = re.search(r'<tr data-agent="dm">(.*?)</tr>', page, re.S).group(1)
    assert 'href="/studio/ashmere/agents/dm/"' in dm
    assert "0 / 1,000 open" in dm  # open tokens against maxOpenTokens
    assert "max 8,000" in dm
    assert "/ 8,000" in dm  # verbatim tokens against maxTokens
    innkeeper = re.search(r'<tr data-agent="innkeeper">(.*?)</tr>', page, re.S).group(1)
    assert ">off<" in innkeeper
    assert "Sliding window" in innkeeper


def test_a_new_agent_is_defined_from_the_list(designer, game):
    response = designer.post(LIST, {"name": "innkeeper", **CONFIG})

    assert response.status_code == 302
    assert response["Location"] == "/studio/ashmere/agents/innkeeper/"
    agent = Agent.objects.get(game=game, name="innkeeper")
    assert (agent.memory_enabled, agent.max_open_tokens, agent.max_tokens) == (True, 1000, 8000)
    assert agent.system_prompt == CONFIG["system_prompt"]


def test_a_new_agent_with_memory_off_has_no_memory(designer, game):
    designer.post(LIST, {"name": "innkeeper", **{**CONFIG, "memory_enabled": ""}})

    assert Agent.objects.get(name="innkeeper").memory_enabled is False


def test_a_new_agent_needs_a_free_valid_name(designer, agent):
    taken = designer.post(LIST, {"name": "dm", **CONFIG})
    invalid = designer.post(LIST, {"name": "the dm", **CONFIG})

    assert taken.status_code == 400
    assert "There is already an agent named &#x27;dm&#x27;" in html(taken)
    assert invalid.status_code == 400
    assert "is not a valid agent name" in html(invalid)
    assert Agent.objects.count() == 1


def test_a_new_agent_breaking_the_definition_rule_is_refused_inline(designer, game):
    response = designer.post(LIST, {"name": "dm", **{**CONFIG, "max_open_tokens": "4000"}})

    assert response.status_code == 400
    assert "data-definition-error" in html(response)
    assert "memory.maxOpenTokens (4,000) must be below half of compaction.maxTokens (8,000)" in html(response)
    assert not Agent.objects.exists()


# --- the config form ----------------------------------------------------------------------------


def test_the_definition_rule_is_shown_next_to_the_fields_with_the_posted_values(designer, agent):
    posted = {**CONFIG, "system_prompt": "A new prompt I do not want to lose.", "max_open_tokens": "4000"}

    response = designer.post(PAGE, posted)

    assert response.status_code == 400
    page = html(response)
    error = re.search(r'<div class="notice notice-error budget-error"[^>]*>(.*?)</div>', page, re.S).group(1)
    assert "4,000" in error and "8,000" in error
    assert re.search(r'name="max_open_tokens" value="4000"[^>]*aria-invalid="true"', page)
    assert re.search(r'name="max_tokens" value="8000"[^>]*aria-invalid="true"', page)
    assert "A new prompt I do not want to lose." in page
    agent.refresh_from_db()
    assert (agent.max_open_tokens, agent.max_tokens) == (4000, 32000)


@pytest.mark.parametrize(
    "max_tokens, most", [("8000", "3,999"), ("8001", "4,000"), ("10000000", "4,999,999")]
)
def test_the_rule_hint_names_the_most_max_open_tokens_may_be(designer, agent, max_tokens, most):
    response = designer.post(PAGE, {**CONFIG, "max_open_tokens": "9000000", "max_tokens": max_tokens})

    hint = re.search(r'<p class="hint rule-hint">(.*?)</p>', html(response), re.S).group(1)
    assert f"(now: {most} at most)" in re.sub(r"<[^>]+>", "", hint)


def test_an_unknown_model_is_shown_next_to_the_model_field(designer, agent):
    response = designer.post(PAGE, {**CONFIG, "model": "gpt-4"})

    assert response.status_code == 400
    assert re.search(r'name="model".*?<ul class="errorlist"[^>]*><li>Unknown model', html(response), re.S)


def test_the_scripted_model_while_it_is_off_is_shown_next_to_the_model_field(designer, game, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    response = designer.post(LIST, {"name": "innkeeper", **CONFIG})

    assert response.status_code == 400
    assert re.search(
        r'name="model".*?<ul class="errorlist"[^>]*><li>The &#x27;scripted&#x27; model is a test model'
        r"[^<]*STUDIO_ALLOW_SCRIPTED_MODEL=1",
        html(response),
        re.S,
    )
    assert not Agent.objects.exists()


def test_a_model_without_a_price_is_shown_next_to_the_model_field_not_the_budgets(designer, agent):
    response = designer.post(PAGE, {**CONFIG, "model": "openai:gpt-x"})

    assert response.status_code == 400
    page = html(response)
    assert re.search(
        r'name="model".*?<ul class="errorlist"[^>]*><li>The model &#x27;openai:gpt-x&#x27; has no price'
        r"[^<]*/admin/billing/modelprice/",
        page,
        re.S,
    )
    assert "data-definition-error" not in page
    agent.refresh_from_db()
    assert agent.model == "scripted"


def test_bad_numbers_are_refused_by_their_fields(designer, agent):
    response = designer.post(PAGE, {**CONFIG, "max_tokens": "12"})

    assert response.status_code == 400
    assert "Ensure this value is greater than or equal to 256" in html(response)


def test_saving_the_config_redirects_with_a_message_and_keeps_the_history(designer, agent):
    turn_send(agent=agent, content="hello")

    response = designer.post(PAGE, CONFIG, follow=True)

    assert response.redirect_chain == [(PAGE, 302)]
    assert "Saved." in html(response)
    agent.refresh_from_db()
    assert (agent.max_open_tokens, agent.max_tokens) == (1000, 8000)
    assert Block.objects.filter(agent=agent).count() == 1


def test_the_form_shows_the_agents_current_config(designer, define):
    define(
        "dm",
        system_prompt="Be terse.",
        max_open_tokens=1200,
        max_tokens=9000,
        compaction_type="sliding-window",
    )

    page = html(designer.get(PAGE))

    assert re.search(r'<textarea name="system_prompt"[^>]*>\s*Be terse.</textarea>', page)
    assert 'name="max_open_tokens" value="1200"' in page
    assert 'name="max_tokens" value="9000"' in page
    assert '<option value="sliding-window" selected>' in page


def test_it_warns_when_memory_is_on_and_the_prompt_names_no_memory(designer, agent):
    page = html(designer.get(PAGE))

    hint = re.search(r"<div [^>]*data-memory-hint[^>]*>", page).group(0)
    assert " hidden" not in hint
    assert "Memory is on, but this prompt never mentions it." in page


@pytest.mark.parametrize(
    ("prompt", "memory_enabled"),
    [
        ("Keep your memories tidy.", True),
        ("Keep `quest` open.", True),  # the name of one of its memories
        ("You are the dungeon master.", False),
    ],
)
def test_it_does_not_warn_when_the_prompt_names_memory_or_memory_is_off(
    designer, define, prompt, memory_enabled
):
    agent = define("dm", system_prompt=prompt, memory_enabled=memory_enabled)
    if memory_enabled:
        turn_send(agent=agent, content=script(call("close_memory", **QUEST)))

    page = html(designer.get(PAGE))

    hint = re.search(r"<div [^>]*data-memory-hint[^>]*>", page).group(0)
    assert hint.endswith(" hidden>")


def test_the_prompting_hint_looks_for_the_names_of_at_most_fifty_memories(designer, agent):
    from memories.models import Memory

    Memory.objects.bulk_create(
        Memory(agent=agent, name=f"m{index:03}", description="d", content="c") for index in range(300)
    )

    page = html(designer.get(PAGE))

    words = json.loads(re.search(r'data-words="([^"]*)"', page).group(1).replace("&quot;", '"'))
    assert words == ["memory", "memories", *(f"m{index:03}" for index in range(50))]


def test_the_page_offers_a_starter_memory_section(designer, agent):
    page = html(designer.get(PAGE))

    assert 'data-insert-target="#config-system_prompt" data-insert-from="#starter-memory"' in page
    starter = re.search(r'<template id="starter-memory">(.*?)</template>', page, re.S).group(1)
    assert "`quest` open at all times" in starter
    assert "`npcs`" in starter and "`world`" in starter
    assert "close it again" in starter


# --- the agent page and its fragments ------------------------------------------------------------


def test_the_page_shows_config_context_and_history(designer, agent):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "Noted."}))

    page = html(designer.get(PAGE))

    assert 'data-live-socket="/ws/studio/ashmere/agents/dm/"' in page
    assert "data-live-status" in page
    assert 'href="/studio/ashmere/agents/dm/memories/"' in page
    assert "You are the dungeon master." in page  # the system prompt, in context and config
    assert "There is no context block before the first compaction" in page
    assert page.count('data-tool-call="close_memory"') == 2  # in the context, and in the history
    assert 'data-block="1" data-status="completed"' in page
    assert "Noted." in page
    assert '<tr data-cost="model">' in page
    assert re.search(
        r'<tr data-cost="memory_access">\s*<td>Memory access</td>\s*<td class="num">1 call</td>', page
    )


@pytest.mark.parametrize("name", FRAGMENTS)
def test_each_fragment_renders_on_its_own_with_its_live_events(designer, agent, name):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST)))

    response = designer.get(PAGE + f"?fragment={name}")

    assert response.status_code == 200
    body = html(response).strip()
    assert "<html" not in body
    assert re.match(rf'<[a-z]+ [^>]*data-live-fragment="{name}" data-live-on="[^"]+"', body)


def test_an_unknown_fragment_is_404(designer, agent):
    assert designer.get(PAGE + "?fragment=nonsense").status_code == 404


def test_the_history_marks_tool_errors_and_failed_turns(designer, agent):
    turn_send(agent=agent, content=script(call("open_memory", name="nothing")))
    turn_send(agent=agent, content=script({"fail": "the model fell over"}))

    page = html(designer.get(PAGE + "?fragment=history"))

    assert '<div class="tool-call is-error" data-tool-call="open_memory">' in page
    assert 'data-block="2" data-status="failed"' in page
    assert "the model fell over" in page


def test_the_history_is_paged_newest_first(designer, agent):
    for n in range(HISTORY_PAGE_SIZE + 3):
        turn_send(agent=agent, content=f"message {n}")

    first = html(designer.get(PAGE + "?fragment=history"))
    older = html(
        designer.get(PAGE + f"?fragment=history&before={HISTORY_PAGE_SIZE + 3 - HISTORY_PAGE_SIZE + 1}")
    )

    numbers = [int(n) for n in re.findall(r'data-block="(\d+)"', first)]
    assert numbers == list(range(23, 3, -1))
    assert 'href="?before=4#history"' in first
    assert [int(n) for n in re.findall(r'data-block="(\d+)"', older)] == [3, 2, 1]
    assert "← Newest" in older


@pytest.mark.django_db(transaction=True)
def test_a_compaction_shows_in_the_checkpoint_and_folds_blocks(designer, agent):
    turn_send(agent=agent, content=script(call("close_memory", **QUEST), {"say": "Noted."}))
    turn_send(agent=agent, content=script(call("open_memory", name="quest")))
    turn_send(agent=agent, content="and now?")

    response = designer.post(COMPACT)

    assert response.status_code == 202
    assert response.json()["message"] == "Compacted: blocks through 2 are folded into the checkpoint."
    assert response.json()["compaction"]["status"] == "done"
    checkpoint = html(designer.get(PAGE + "?fragment=checkpoint"))
    assert "Folds blocks 1–2" in checkpoint
    assert "Find the silver key." in checkpoint  # quest was open
    history = html(designer.get(PAGE + "?fragment=history"))
    assert re.search(r'<article class="block folded" data-block="2"', history)
    assert re.search(r'<article class="block" data-block="3"', history)
    assert "Folded into the checkpoint" in history
    context = html(designer.get(PAGE + "?fragment=context"))
    assert "## Open memories — current as of this point" in context
    compactions = html(designer.get(PAGE + "?fragment=compactions"))
    assert 'data-status="done"' in compactions and "Asked for" in compactions


def test_the_context_window_counts_the_tools_exactly_for_the_scripted_model(designer, agent):
    tokens = context_assemble(agent).tokens()

    context = html(designer.get(PAGE + "?fragment=context"))

    assert f"Tools <strong>{tokens['tools']:,}</strong>" in context
    assert f'<strong class="ink">{tokens["total"]:,}</strong> of 32,000 tokens' in context
    assert "≈" not in context
    assert "data-token-estimate" not in context


def test_the_context_window_of_a_real_model_marks_its_counts_as_estimates_and_says_why(designer, agent):
    Agent.objects.filter(pk=agent.pk).update(model="openai:gpt-4o-mini")
    agent.refresh_from_db()
    tokens = context_assemble(agent).tokens()

    context = html(designer.get(PAGE + "?fragment=context"))

    assert f'≈<strong class="ink">{tokens["total"]:,}</strong> of 32,000 tokens' in context
    assert f"Tools <strong>≈{tokens['tools']:,}</strong>" in context
    note = re.search(r"<p [^>]*data-token-estimate>(.*?)</p>", context, re.S).group(1)
    assert "counted with cl100k_base" in note
    assert "<code>openai:gpt-4o-mini</code>" in note


@pytest.mark.django_db(transaction=True)
def test_compact_now_with_nothing_to_fold_says_so(designer, agent):
    response = designer.post(COMPACT)

    assert response.status_code == 202
    assert response.json()["message"].startswith("Nothing to fold")


# --- sending as the player -------------------------------------------------------------------------


def test_a_send_answers_with_the_reply_and_the_turn(designer, agent):
    response = designer.post(SEND, {"content": script(call("close_memory", **QUEST), {"say": "Noted."})})

    assert response.status_code == 200
    body = response.json()
    assert body["message"] == "Block 1 — Noted."
    assert body["turn"]["status"] == "completed"
    assert body["turn"]["toolCalls"][0]["name"] == "close_memory"
    assert Block.objects.filter(agent=agent).count() == 1


def test_a_transient_send_shows_its_reply_and_leaves_no_trace(designer, agent):
    response = designer.post(SEND, {"content": "Who are you?", "transient": "on"})

    body = response.json()
    assert response.status_code == 200
    assert body["turn"]["transient"] is True
    assert body["turn"]["block"] is None
    assert body["message"].startswith("Transient reply — not kept in history:\n")
    assert body["turn"]["reply"] in body["message"]
    assert not Block.objects.exists()


def test_a_failed_turn_is_told_with_its_reason(designer, agent):
    response = designer.post(SEND, {"content": script({"fail": "no luck"})})

    assert response.status_code == 200
    assert response.json()["tone"] == "error"
    assert response.json()["message"].startswith("The turn failed: The model call failed")
    assert "no luck" in response.json()["message"]


def test_a_turn_cut_short_shows_its_reply_and_says_why(designer, agent, studio_conf):
    studio_conf(MAX_MODEL_STEPS=1)
    designer.post(SEND, {"content": script(call("close_memory", **QUEST), call("open_memory", name="quest"))})

    page = designer.get(PAGE + "?fragment=history").content.decode()

    note = re.search(r"<div [^>]*data-cut-short>(.*?)</div>", page, re.S).group(1)
    assert "made 1 call without replying" in note and "no tools" in note


def test_an_empty_send_is_refused(designer, agent):
    response = designer.post(SEND, {"content": "   "})

    assert response.status_code == 400
    assert "non-empty" in error_of(response)["message"]


def test_a_send_the_game_cannot_pay_for_is_402(designer, agent, game):
    Account.objects.filter(game=game).update(balance=0)

    response = designer.post(SEND, {"content": "hello"})

    assert response.status_code == 402
    assert error_of(response)["code"] == "budget_exhausted"
    assert "cannot pay" in error_of(response)["message"]


def test_an_admin_member_may_send_too(admin, agent):
    assert admin.post(SEND, {"content": "hello"}).status_code == 200


# --- cancelling ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_running_turn_is_cancelled_from_the_page(designer, agent):
    thread, box = in_thread(turn_send, agent=agent, content=script(UNTIL_CANCELLED))
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.RUNNING).exists())
    turn = Turn.objects.get()
    history = html(designer.get(PAGE + "?fragment=history"))
    assert f'action="{cancel_url(turn)}"' in history

    response = designer.post(cancel_url(turn))
    thread.join(10)

    assert response.status_code == 202
    assert response.json()["message"].startswith("Cancelling")
    assert box["result"].status == TurnStatus.CANCELLED


def test_cancelling_an_ended_turn_is_409(designer, agent):
    turn = turn_send(agent=agent, content="hello")

    response = designer.post(cancel_url(turn))

    assert response.status_code == 409
    assert error_of(response)["code"] == "turn_ended"


def test_cancelling_another_agents_turn_is_404(designer, define):
    define("dm")
    other = turn_send(agent=define("innkeeper"), content="hello")

    response = designer.post(cancel_url(other))

    assert response.status_code == 404
    assert error_of(response)["code"] == "turn_not_found"


def test_json_answers_are_json(designer, agent):
    response = designer.post(SEND, {"content": "hello"})

    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)["turn"]["status"] == "completed"


def test_sends_from_the_studio_pages_are_limited_per_designer(designer, agent, studio_conf):
    studio_conf(SEND_RATE=(2, 60))  # 2 a minute
    # A user's id comes back in the next run's new database: start its
    # window afresh (clearing the whole cache would empty all of Redis).
    window_clear(send_window(f"user:{User.objects.get(username='mara').pk}"))

    responses = [designer.post("/studio/ashmere/agents/dm/send/", {"content": "hi"}) for _ in range(3)]

    assert [r.status_code for r in responses] == [200, 200, 429]
    assert error_of(responses[-1])["code"] == "rate_limited"
    assert 0 < int(responses[-1]["Retry-After"]) <= 60


def test_a_context_of_thousands_of_messages_lists_the_newest_and_says_how_many_are_not(designer, define):
    from agents.pages.view_models import CONTEXT_MESSAGES_SHOWN

    agent = define("dm", max_tokens=1_000_000)
    said = [{"type": "message", "role": "user", "content": f"Line {n}."} for n in range(1, 401)]
    Block.objects.bulk_create(
        Block(agent=agent, number=n, status=TurnStatus.COMPLETED, entries=[said[n - 1]], tokens=6)
        for n in range(1, 401)
    )
    Agent.objects.filter(pk=agent.pk).update(last_block=400)

    html = designer.get(PAGE + "?fragment=context").content.decode()

    assert html.count('class="entry entry-user"') == CONTEXT_MESSAGES_SHOWN
    assert "Line 400." in html and "Line 100." not in html
    assert "The 100 earlier messages are not listed here" in html
    assert "400 messages" in html


def test_the_open_memories_card_counts_memories_and_their_tokens(designer, agent):
    turn_send(
        agent=agent,
        content=script(
            call("close_memory", name="quest", description="d", content="Find the key."),
            call("close_memory", name="npcs", description="d", content="The ferryman."),
            call("close_memory", name="bells", description="d", content="At dusk."),
            call("open_memory", name="quest"),
            call("open_memory", name="npcs"),
        ),
    )

    html = designer.get(PAGE + "?fragment=stats").content.decode()

    card = re.sub(r"<[^>]+>|\s+", " ", html[html.index("data-open-memories") : html.index("data-meter")])
    assert re.search(r"Open memories 2 of 3 memories \d+ / 4,000 tokens open", " ".join(card.split()))


def test_the_new_agent_form_does_not_warn_before_a_prompt_is_written(designer, game):
    page = html(designer.get("/studio/ashmere/agents/"))

    hint = re.search(r"<div [^>]*data-memory-hint[^>]*>", page).group(0)
    assert hint.endswith(" hidden>")
