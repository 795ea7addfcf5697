"""PUT/GET/DELETE /api/v1/agents/{name} and GET /api/v1/agents."""

from decimal import Decimal

import pytest

from agents.models import Agent, Block, Checkpoint, Turn
from billing.models import CostLine, ModelPrice
from memories.models import Memory, MemoryEvent
from tests.conftest import call, error_of, script

DM = "/api/v1/agents/dm"


def put(client, body, name="dm"):
    return client.put(f"/api/v1/agents/{name}", body, format="json")


# --- PUT: define and redefine ---------------------------------------------------------


def test_put_creates_an_agent_with_201_and_returns_it(api, game):
    response = put(
        api,
        {
            "systemPrompt": "You are the dungeon master.",
            "model": "scripted",
            "memory": {"maxOpenTokens": 2000},
            "compaction": {"type": "sliding-window", "maxTokens": 16000},
        },
    )

    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "dm"
    assert body["systemPrompt"] == "You are the dungeon master."
    assert body["model"] == "scripted"
    assert body["memory"] == {"maxOpenTokens": 2000}
    assert body["compaction"] == {"type": "sliding-window", "maxTokens": 16000}
    agent = Agent.objects.get(game=game, name="dm")
    assert (agent.memory_enabled, agent.max_open_tokens, agent.max_tokens) == (True, 2000, 16000)


def test_put_on_an_existing_agent_redefines_it_with_200(api, agent):
    response = put(api, {"systemPrompt": "You are the innkeeper.", "memory": {}})

    assert response.status_code == 200
    assert response.json()["systemPrompt"] == "You are the innkeeper."
    assert Agent.objects.get(pk=agent.pk).system_prompt == "You are the innkeeper."
    assert Agent.objects.filter(name="dm").count() == 1


def test_the_put_response_is_the_agent_as_get_shows_it(api):
    created = put(api, {"systemPrompt": "Hi", "memory": {}}).json()

    fetched = api.get(DM).json()

    assert created == fetched


def test_an_empty_memory_object_takes_every_default(api):
    response = put(api, {"memory": {}})

    assert response.json()["memory"] == {"maxOpenTokens": 4000}


def test_compaction_absent_defaults_to_summarize_at_32000(api):
    response = put(api, {"memory": {"maxOpenTokens": 1000}})

    assert response.json()["compaction"] == {"type": "summarize", "maxTokens": 32000}


def test_compaction_with_only_a_type_keeps_the_default_budget(api):
    response = put(api, {"compaction": {"type": "sliding-window"}})

    assert response.json()["compaction"] == {"type": "sliding-window", "maxTokens": 32000}


@pytest.mark.parametrize("body", [{}, {"memory": None}], ids=["absent", "null"])
def test_memory_absent_or_null_means_no_memory_tools(api, body):
    response = put(api, {"systemPrompt": "Hi", **body})

    assert response.json()["memory"] is None
    assert api.get(f"{DM}/context").json()["tools"] == []


def test_memory_on_offers_the_three_memory_tools(api):
    put(api, {"memory": {}})

    response = api.get(f"{DM}/context")

    assert response.json()["tools"] == ["open_memory", "close_memory", "delete_memory"]


def test_the_model_defaults_to_scripted(api):
    response = put(api, {"systemPrompt": "Hi"})

    assert response.json()["model"] == "scripted"


# --- the definition-time rule -----------------------------------------------------------


def test_open_memories_at_half_the_compaction_budget_are_refused_naming_both_numbers(api):
    response = put(api, {"memory": {"maxOpenTokens": 4000}, "compaction": {"maxTokens": 8000}})

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_definition"
    assert error["message"] == (
        "memory.maxOpenTokens (4,000) must be below half of compaction.maxTokens (8,000), so 3,999 "
        "at most. Lower memory.maxOpenTokens to 3,999 or raise compaction.maxTokens to 8,001."
    )
    assert not Agent.objects.filter(name="dm").exists()


@pytest.mark.parametrize(
    "max_open, max_tokens, says",
    [
        (
            5_000_000,
            10_000_000,
            "(5,000,000) must be below half of compaction.maxTokens (10,000,000), so 4,999,999",
        ),
        (
            4001,
            8001,
            "so 4,000 at most. Lower memory.maxOpenTokens to 4,000 or raise compaction.maxTokens to 8,003.",
        ),
    ],
)
def test_the_definition_rule_names_the_exact_bound_in_whole_numbers(api, max_open, max_tokens, says):
    response = put(api, {"memory": {"maxOpenTokens": max_open}, "compaction": {"maxTokens": max_tokens}})

    message = error_of(response)["message"]
    assert says in message
    assert "e+" not in message and ".5" not in message


@pytest.mark.parametrize("max_open, max_tokens", [(1000, 8000), (4000, 8001)])
def test_open_memories_below_half_the_compaction_budget_are_allowed(api, max_open, max_tokens):
    response = put(api, {"memory": {"maxOpenTokens": max_open}, "compaction": {"maxTokens": max_tokens}})

    assert response.status_code == 201
    assert response.json()["memory"] == {"maxOpenTokens": max_open}


def test_the_default_open_budget_is_checked_against_a_small_compaction_budget(api):
    response = put(api, {"memory": {}, "compaction": {"maxTokens": 8000}})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"


def test_with_memory_off_the_rule_is_not_checked(api):
    response = put(api, {"memory": None, "compaction": {"maxTokens": 1000}})

    assert response.status_code == 201


def test_a_redefinition_that_breaks_the_rule_leaves_the_agent_as_it_was(api, agent):
    response = put(
        api, {"systemPrompt": "New", "memory": {"maxOpenTokens": 5000}, "compaction": {"maxTokens": 8000}}
    )

    assert response.status_code == 400
    agent.refresh_from_db()
    assert (agent.system_prompt, agent.max_open_tokens) == ("You are the dungeon master.", 4000)


# --- bad definitions -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, field, problem",
    [
        ({"systemPrompt": "Hi", "temperature": 0.2}, "temperature", "is not a field here"),
        (
            {"memory": {"maxOpenToken": 100}},
            "memory.maxOpenToken",
            "is not a field here; did you mean 'maxOpenTokens'?",
        ),
        ({"compaction": {"type": "summarize", "budget": 100}}, "compaction.budget", "is not a field here"),
    ],
    ids=["top-level", "in-memory", "in-compaction"],
)
def test_unknown_keys_are_refused_by_name(api, body, field, problem):
    response = put(api, body)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_definition"
    assert error["message"] == f"{field}: {problem}"
    assert error["details"] == [{"field": field, "message": problem}]
    assert not Agent.objects.exists()


def test_each_problem_of_a_body_is_in_the_details_by_its_dotted_path(api):
    response = put(
        api, {"systemPrompt": 7, "memory": {"maxOpenTokens": "lots"}, "compaction": {"type": "forget"}}
    )

    error = error_of(response)
    assert error["details"] == [
        {"field": "systemPrompt", "message": "must be a string"},
        {"field": "memory.maxOpenTokens", "message": "must be a whole number, not a string"},
        {
            "field": "compaction.type",
            "message": '"forget" is not a valid choice; the choices are "summarize", "sliding-window".',
        },
    ]
    assert error["message"] == "; ".join(f"{d['field']}: {d['message']}" for d in error["details"])


def test_a_body_that_is_not_an_object_is_a_problem_of_no_field(api):
    error = error_of(put(api, ["systemPrompt"]))

    assert [d["field"] for d in error["details"]] == [None]
    assert error["message"] == error["details"][0]["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"systemPrompt": ["You are"]},
        {"systemPrompt": None},
        {"model": 7.5},
        {"memory": "yes"},
        {"memory": {"maxOpenTokens": "lots"}},
        {"memory": {"maxOpenTokens": 0}},
        {"memory": {"maxOpenTokens": 10.5}},
        {"compaction": {"type": "forget"}},
        {"compaction": {"maxTokens": "big"}},
        {"compaction": {"maxTokens": "8000"}},
        {"memory": {"maxOpenTokens": "1000"}},
        {"memory": {"maxOpenTokens": True}},
        {"compaction": None},
        ["systemPrompt"],
    ],
)
def test_bad_types_and_values_are_refused(api, body):
    response = put(api, body)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"
    assert not Agent.objects.exists()


@pytest.mark.parametrize("model", ["gpt-4o", "openai:", "anthropic", "Scripted", ""])
def test_an_unknown_model_string_is_refused(api, model):
    response = put(api, {"model": model})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"


def price(model: str) -> ModelPrice:
    return ModelPrice.objects.create(model=model, input_per_mtok=Decimal("1"), output_per_mtok=Decimal("4"))


@pytest.mark.parametrize("model", ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"])
def test_provider_model_strings_are_accepted(api, model):
    price(model)

    response = put(api, {"model": model})

    assert response.status_code == 201
    assert response.json()["model"] == model


# --- which models this studio offers ----------------------------------------------------


def test_the_scripted_model_is_refused_naming_the_setting_while_it_is_off(api, studio_conf):
    # Nor is it the default then (tests/agents/test_default_model.py).
    studio_conf(ALLOW_SCRIPTED_MODEL=False)

    response = put(api, {"model": "scripted"})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"
    assert "'scripted' model is a test model" in error_of(response)["message"]
    assert "STUDIO_ALLOW_SCRIPTED_MODEL=1" in error_of(response)["message"]
    assert not Agent.objects.exists()


def test_the_scripted_model_is_accepted_while_the_setting_is_on(api, studio_conf):
    studio_conf(ALLOW_SCRIPTED_MODEL=True)

    response = put(api, {"model": "scripted"})

    assert response.status_code == 201
    assert response.json()["model"] == "scripted"


def test_a_model_without_a_price_of_its_own_is_refused_naming_it_and_where_to_price_it(api):
    response = put(api, {"model": "openai:gpt-x"})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_definition"
    message = error_of(response)["message"]
    assert "The model 'openai:gpt-x' has no price of its own" in message
    assert "/admin/billing/modelprice/" in message
    assert not Agent.objects.exists()


def test_a_model_named_like_a_priced_one_gets_that_one_suggested(api):
    price("openai:gpt-4o-mini")
    price("openai:gpt-4o")

    for typed, meant in [
        ("openai:gpt4o-mini", "openai:gpt-4o-mini"),
        ("openai:GPT-4o-mini", "openai:gpt-4o-mini"),
        ("openai:gtp-4o", "openai:gpt-4o"),
    ]:
        response = put(api, {"model": typed})
        assert response.status_code == 400
        message = error_of(response)["message"]
        assert f"The model '{typed}' has no price of its own" in message
        assert f"Did you mean '{meant}'? That one has a price." in message


def test_a_model_named_like_no_priced_one_gets_no_suggestion(api):
    price("openai:gpt-4o-mini")

    message = error_of(put(api, {"model": "anthropic:claude-opus-4"}))["message"]

    assert "has no price of its own" in message and "Did you mean" not in message


def test_a_model_is_accepted_once_it_has_a_price_of_its_own(api):
    assert put(api, {"model": "openai:gpt-x"}).status_code == 400

    price("openai:gpt-x")

    assert put(api, {"model": "openai:gpt-x"}).status_code == 201


def test_with_unpriced_models_allowed_a_model_without_a_price_is_accepted(api, studio_conf):
    studio_conf(ALLOW_UNPRICED_MODELS=True)

    response = put(api, {"model": "anthropic:claude-x"})

    assert response.status_code == 201
    assert not ModelPrice.objects.filter(model="anthropic:claude-x").exists()


def test_with_a_list_of_unpriced_models_allowed_only_those_are_accepted_without_a_price(api, studio_conf):
    studio_conf(ALLOW_UNPRICED_MODELS=frozenset({"openai:llama3.1", "anthropic:claude-x"}))

    assert put(api, {"model": "openai:llama3.1"}, name="a").status_code == 201
    assert put(api, {"model": "anthropic:claude-x"}, name="b").status_code == 201
    refused = put(api, {"model": "openai:gpt-x"}, name="c")

    assert refused.status_code == 400
    assert error_of(refused)["code"] == "invalid_definition"
    assert "STUDIO_ALLOW_UNPRICED_MODELS" in error_of(refused)["message"]
    assert not Agent.objects.filter(name="c").exists()


@pytest.mark.parametrize("name", ["x" * 65, "a%20b", "dm!", "dm.v2", "%C3%A9lise"])
def test_an_invalid_name_is_400_invalid_name(api, name):
    response = put(api, {"systemPrompt": "Hi"}, name=name)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_name"
    assert not Agent.objects.exists()


def test_a_name_ending_in_a_newline_is_refused(api):
    response = put(api, {"systemPrompt": "Hi"}, name="dm%0A")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_name"
    assert not Agent.objects.exists()


@pytest.mark.parametrize("name", ["d", "x" * 64, "Old_Mara-2"])
def test_names_of_1_to_64_allowed_characters_are_accepted(api, name):
    response = put(api, {"systemPrompt": "Hi"}, name=name)

    assert response.status_code == 201
    assert response.json()["name"] == name


def test_a_body_that_is_not_json_is_400(api):
    response = api.put(DM, "{not json", content_type="application/json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


# --- redefinition changes config only ------------------------------------------------


def test_redefining_keeps_history_memories_and_blocks(api, agent, send):
    send(script(call("close_memory", name="quest", description="The goal", content="Find the key.")))
    history = api.get(f"{DM}/history").json()
    memories = api.get(f"{DM}/memories").json()

    response = put(api, {"systemPrompt": "You are a grumpier dungeon master.", "memory": {}})

    assert response.status_code == 200
    assert response.json()["stats"]["blocks"] == 1
    assert api.get(f"{DM}/history").json() == history
    assert api.get(f"{DM}/memories").json() == memories
    assert api.get(f"{DM}/context").json()["system"] == "You are a grumpier dungeon master."
    assert Block.objects.filter(agent=agent).count() == 1


def test_redefining_keeps_the_checkpoint(api, agent, send):
    send("Hello")
    Checkpoint.objects.create(
        agent=agent, kind="forced", through_block=1, summary="s", context_block="[block]"
    )

    put(api, {"systemPrompt": "Changed", "memory": {}})

    assert api.get(f"{DM}/checkpoint").status_code == 200
    assert api.get(DM).json()["stats"]["lastCheckpoint"]["throughBlock"] == 1


def test_turning_memory_off_keeps_the_memories_but_offers_no_tools(api, agent, send):
    send(script(call("close_memory", name="quest", description="The goal", content="Find the key.")))

    put(api, {"systemPrompt": "Hi", "memory": None})

    assert api.get(f"{DM}/context").json()["tools"] == []
    assert Memory.objects.filter(agent=agent, name="quest").exists()


# --- GET list -----------------------------------------------------------------------


def test_the_list_has_the_games_agents_by_name(api, define, outsider):
    define("innkeeper", system_prompt="You keep the inn.")
    define("dm", system_prompt="You are the dungeon master.", memory_enabled=False)
    outsider.put("/api/v1/agents/stranger", {"systemPrompt": "Hi"}, format="json")

    response = api.get("/api/v1/agents")

    assert response.status_code == 200
    agents = response.json()["agents"]
    assert [a["name"] for a in agents] == ["dm", "innkeeper"]
    assert agents[0]["memory"] is None
    assert agents[1]["memory"] == {"maxOpenTokens": 4000}
    assert agents[1]["systemPrompt"] == "You keep the inn."


def test_the_list_is_empty_for_a_game_without_agents(api):
    response = api.get("/api/v1/agents")

    assert response.json() == {"agents": [], "nextCursor": None}


@pytest.mark.parametrize("count", [3, 10])
def test_the_list_takes_the_same_few_queries_however_many_agents(
    api, define, send, count, django_assert_max_num_queries
):
    for index in range(count):
        define(f"npc-{index}")
    send("Hello", name="npc-0")

    with django_assert_max_num_queries(3):
        response = api.get("/api/v1/agents")

    assert len(response.json()["agents"]) == count


# --- GET one ---------------------------------------------------------------------------


def test_get_returns_config_and_empty_stats_for_a_new_agent(api, agent):
    response = api.get(DM)

    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "dm"
    assert body["systemPrompt"] == "You are the dungeon master."
    assert body["memory"] == {"maxOpenTokens": 4000}
    assert body["compaction"] == {"type": "summarize", "maxTokens": 32000}
    assert body["stats"] == {
        "blocks": 0,
        "verbatimTokens": 0,
        "openTokens": 0,
        "storeBytes": 0,
        "lastCheckpoint": None,
    }


def test_get_stats_count_blocks_tokens_and_the_store(api, agent, send):
    send(
        script(
            call("close_memory", name="quest", description="The goal", content="Find the silver key."),
            call("open_memory", name="quest"),
            call("close_memory", name="npcs", description="People", content="The ferryman."),
        )
    )
    send("I walk on.")

    stats = api.get(DM).json()["stats"]

    quest = Memory.objects.get(agent=agent, name="quest")
    npcs = Memory.objects.get(agent=agent, name="npcs")
    block_tokens = sum(Block.objects.filter(agent=agent).values_list("tokens", flat=True))
    assert stats["blocks"] == 2
    assert stats["verbatimTokens"] == block_tokens > 0
    assert stats["openTokens"] == quest.tokens > 0
    assert stats["storeBytes"] == quest.bytes + npcs.bytes
    assert stats["lastCheckpoint"] is None


def test_get_stats_show_the_last_checkpoint(api, agent, send):
    send("Hello")
    Checkpoint.objects.create(
        agent=agent, kind="compaction", through_block=1, summary="s", context_block="[block]"
    )

    stats = api.get(DM).json()["stats"]

    assert stats["lastCheckpoint"]["kind"] == "compaction"
    assert stats["lastCheckpoint"]["throughBlock"] == 1
    assert stats["verbatimTokens"] == 0  # block 1 is behind the checkpoint


@pytest.mark.parametrize("key, method", [("api", "get"), ("admin_api", "delete")])
def test_an_unknown_agent_is_404(request, key, method):
    response = getattr(request.getfixturevalue(key), method)("/api/v1/agents/nobody")

    assert response.status_code == 404
    assert error_of(response)["code"] == "agent_not_found"


# --- DELETE -------------------------------------------------------------------------------


def test_delete_removes_the_agent_with_its_memories_turns_and_blocks(admin_api, api, agent, send):
    turn = send(script(call("close_memory", name="quest", description="The goal", content="Find it.")))
    Checkpoint.objects.create(agent=agent, kind="forced", through_block=1, context_block="[b]")

    response = admin_api.delete(DM)

    assert response.status_code == 204
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert not Memory.objects.filter(agent_id=agent.pk).exists()
    assert not MemoryEvent.objects.filter(agent_id=agent.pk).exists()
    assert not Turn.objects.filter(agent_id=agent.pk).exists()
    assert not Block.objects.filter(agent_id=agent.pk).exists()
    assert not Checkpoint.objects.filter(agent_id=agent.pk).exists()
    assert api.get(DM).status_code == 404
    # The ledger outlives the agent: what was spent stays spent.
    assert CostLine.objects.filter(turn_id=turn["id"]).exists()


def test_delete_by_a_designer_is_403_and_removes_nothing(api, agent, send):
    send("Hello")

    response = api.delete(DM)

    assert response.status_code == 403
    assert error_of(response)["code"] == "forbidden"
    assert api.get(DM).json()["stats"]["blocks"] == 1


def test_a_name_can_be_defined_again_after_delete_and_starts_fresh(admin_api, api, agent, send):
    send("Hello")
    admin_api.delete(DM)

    response = put(api, {"systemPrompt": "Again", "memory": {}})

    assert response.status_code == 201
    assert response.json()["stats"]["blocks"] == 0
    assert api.get(f"{DM}/history").json()["blocks"] == []


# --- another game ----------------------------------------------------------------------


def test_another_games_agent_is_404_to_get(outsider, agent):
    response = outsider.get(DM)

    assert response.status_code == 404
    assert error_of(response)["code"] == "agent_not_found"


def test_another_games_agent_is_404_to_delete_even_for_an_admin_key(outsider, agent):
    response = outsider.delete(DM)

    assert response.status_code == 404
    assert Agent.objects.filter(pk=agent.pk).exists()


def test_put_by_another_game_defines_its_own_agent_and_leaves_ours_alone(outsider, api, agent, other_game):
    response = put(outsider, {"systemPrompt": "Someone else's DM", "memory": None})

    assert response.status_code == 201
    assert Agent.objects.get(game=other_game, name="dm").system_prompt == "Someone else's DM"
    ours = api.get(DM).json()
    assert ours["systemPrompt"] == "You are the dungeon master."
    assert ours["memory"] == {"maxOpenTokens": 4000}


# --- methods and keys -----------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path",
    [
        ("patch", DM),
        ("post", DM),
        ("post", "/api/v1/agents"),
        ("put", "/api/v1/agents"),
        ("delete", "/api/v1/agents"),
    ],
)
def test_other_methods_are_405(admin_api, agent, method, path):
    response = getattr(admin_api, method)(path, {}, format="json")

    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert Agent.objects.filter(pk=agent.pk).exists()


@pytest.mark.parametrize(
    "method, path", [("get", "/api/v1/agents"), ("get", DM), ("put", DM), ("delete", DM)]
)
def test_the_agent_endpoints_need_a_key(anonymous, agent, method, path):
    response = getattr(anonymous, method)(path, {"systemPrompt": "x"}, format="json")

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthenticated"
    assert Agent.objects.get(pk=agent.pk).system_prompt == "You are the dungeon master."


# --- constructing again ---------------------------------------------------------------------

DEFINITION = {"systemPrompt": "You are the dungeon master.", "memory": {}}


def test_constructing_an_agent_again_with_the_same_config_writes_nothing(
    api, agent_revisions, django_assert_num_queries
):
    first = api.put("/api/v1/agents/dm", DEFINITION, format="json").json()

    # The key's lookup, and the agent read with its stats: nothing written.
    with django_assert_num_queries(2):
        answers = [api.put("/api/v1/agents/dm", DEFINITION, format="json")]
    for _ in range(5):
        answers.append(api.put("/api/v1/agents/dm", DEFINITION, format="json"))

    assert {a.status_code for a in answers} == {200}
    assert all(a.json() == first for a in answers)  # updatedAt never moved
    assert agent_revisions() == 1


def test_a_changed_config_makes_exactly_one_revision(api, agent_revisions):
    api.put("/api/v1/agents/dm", DEFINITION, format="json")

    changed = api.put(
        "/api/v1/agents/dm", {**DEFINITION, "systemPrompt": "You are the ferryman."}, format="json"
    )
    api.put("/api/v1/agents/dm", {**DEFINITION, "systemPrompt": "You are the ferryman."}, format="json")

    assert changed.status_code == 200 and changed.json()["systemPrompt"] == "You are the ferryman."
    assert agent_revisions() == 2


def test_the_agent_read_in_one_statement_has_the_stats_the_list_has(
    api, send, agent, django_capture_on_commit_callbacks
):
    from agents.selectors import agent_stats, agent_with_stats

    send(script(call("close_memory", name="quest", description="Now", content="Find the key.")))
    send(script(call("open_memory", name="quest")))
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/api/v1/agents/dm/compact")
    send("Three.")

    agent.refresh_from_db()
    stats = agent_with_stats(game=agent.game, name="dm").stats
    assert stats == agent_stats(agent)
    assert stats["openTokens"] and stats["storeBytes"] and stats["verbatimTokens"] and stats["lastCheckpoint"]


@pytest.fixture
def agent_revisions(game):
    from agents.models import AgentRevision

    return lambda: AgentRevision.objects.filter(agent__game=game, agent__name="dm").count()


def test_a_max_open_tokens_below_a_memory_the_agent_holds_is_refused_naming_it(api, send):
    api.put("/api/v1/agents/dm", {**DEFINITION, "memory": {"maxOpenTokens": 1000}}, format="json")
    send(
        script(call("close_memory", name="npcs", description="Who Mara met", content="word" + " word" * 599))
    )

    refused = api.put("/api/v1/agents/dm", {**DEFINITION, "memory": {"maxOpenTokens": 200}}, format="json")

    assert refused.status_code == 400
    error = error_of(refused)
    assert error["code"] == "invalid_definition"
    assert "'npcs' (600 tokens)" in error["message"] and "600 or more" in error["message"]
    assert api.get("/api/v1/agents/dm").json()["memory"] == {"maxOpenTokens": 1000}
    # Off, nothing is stranded; turned on again with too small a budget, it is refused again.
    assert api.put("/api/v1/agents/dm", DEFINITION | {"memory": None}, format="json").status_code == 200
    again = api.put("/api/v1/agents/dm", {**DEFINITION, "memory": {"maxOpenTokens": 200}}, format="json")
    assert again.status_code == 400
