"""Definitions with provenance through the API (#36): every revision of an
agent's config records who defined it and from where; `GET /agents/{name}`
answers an ETag naming its revision, and `PUT` with If-Match answers 412
`definition_changed` when the agent has been defined since."""

import threading

import pytest

from agents.models import Agent, AgentRevision
from studio.auth.keys import apikey_create
from studio.models import ApiKey, Role
from tests.support.agent_file import exported

from ..conftest import client_for, error_of

DM = "/api/v1/agents/dm"
DEFINITION = {"systemPrompt": "You are the dungeon master.", "model": "scripted", "memory": {}}
CHANGED = {**DEFINITION, "systemPrompt": "You are the ferryman."}


def put(api, body=DEFINITION, name="dm", **extra):
    return api.put(f"/api/v1/agents/{name}", body, format="json", **extra)


def revisions(name="dm") -> list[int]:
    return list(AgentRevision.objects.filter(agent__name=name).values_list("number", flat=True))


@pytest.fixture
def server_key(game) -> str:
    """A designer key labelled as game code labels its keys."""
    return apikey_create(game=game, role=Role.DESIGNER, label="server")[1]


@pytest.fixture
def server(server_key):
    return client_for(server_key)


# --- the ETag ---------------------------------------------------------------------------------


def test_get_answers_an_etag_naming_the_agents_revision(server):
    put(server)
    first = server.get(DM)
    put(server, CHANGED)
    second = server.get(DM)

    assert first.status_code == 200
    assert first["ETag"] == '"1"' and first.json()["revision"]["number"] == 1
    assert second["ETag"] == '"2"' and second.json()["revision"]["number"] == 2


def test_put_answers_the_etag_of_the_revision_it_leaves(server):
    created, same, changed = put(server), put(server), put(server, CHANGED)

    assert [created.status_code, same.status_code, changed.status_code] == [201, 200, 200]
    assert [created["ETag"], same["ETag"], changed["ETag"]] == ['"1"', '"1"', '"2"']


# --- If-Match ---------------------------------------------------------------------------------


def test_a_put_with_the_current_etag_goes_ahead(server):
    etag = put(server)["ETag"]

    response = put(server, CHANGED, HTTP_IF_MATCH=etag)

    assert response.status_code == 200, response.content
    assert response.json()["systemPrompt"] == "You are the ferryman."
    assert response["ETag"] == '"2"' and revisions() == [1, 2]


def test_a_put_with_a_stale_etag_is_412_naming_the_revision_and_who_made_it(server, server_key, designer):
    stale = put(server)["ETag"]
    designer.post("/studio/ashmere/agents/dm/", _page_config("Edited in the page."))

    response = put(server, CHANGED, HTTP_IF_MATCH=stale)

    assert response.status_code == 412
    error = error_of(response)
    assert error["code"] == "definition_changed"
    assert "revision 2" in error["message"] and "by mara" in error["message"]
    assert "If-Match" in error["message"]
    assert Agent.objects.get(name="dm").system_prompt == "Edited in the page."
    assert revisions() == [1, 2]


def test_a_stale_etag_over_the_config_the_agent_has_is_200_and_writes_nothing(server):
    # The change asked for is in place (RFC 9110 13.1.1): so a definition
    # retried after its answer was lost is not refused for its own write.
    put(server)
    put(server, CHANGED)

    response = put(server, CHANGED, HTTP_IF_MATCH='"1"')

    assert response.status_code == 200 and response["ETag"] == '"2"'
    assert revisions() == [1, 2]


@pytest.mark.parametrize("header", ['"1", "2"', '"2"', "2", '"9", "2"'])
def test_if_match_takes_a_list_of_etags_and_an_unquoted_number(server, header):
    put(server)
    put(server, CHANGED)

    response = put(server, DEFINITION, HTTP_IF_MATCH=header)

    assert response.status_code == 200 and response["ETag"] == '"3"'


@pytest.mark.parametrize("header", ['W/"2"', '"two"', '""', ","])
def test_a_weak_or_foreign_etag_never_matches(server, header):
    put(server)
    put(server, CHANGED)

    response = put(server, DEFINITION, HTTP_IF_MATCH=header)

    assert response.status_code == 412
    assert revisions() == [1, 2]


def test_if_match_star_or_none_defines_whatever_the_agent_is_at(server):
    put(server)
    put(server, CHANGED)

    star = put(server, DEFINITION, HTTP_IF_MATCH="*")
    none = put(server, CHANGED)

    assert (star.status_code, none.status_code) == (200, 200)
    assert revisions() == [1, 2, 3, 4]


def test_if_match_on_an_agent_that_does_not_exist_is_412_and_makes_none(server):
    response = put(server, HTTP_IF_MATCH='"1"')
    created = put(server, HTTP_IF_MATCH="*")

    assert response.status_code == 412
    assert "no agent named 'dm'" in error_of(response)["message"]
    assert created.status_code == 201


@pytest.mark.django_db(transaction=True)
def test_two_puts_over_the_same_revision_at_once_write_one_and_refuse_the_other(server_key):
    first = client_for(server_key)
    etag = put(first)["ETag"]
    answers, start = [], threading.Barrier(2)

    def redefine(prompt):
        client = client_for(server_key)
        start.wait()
        answers.append(put(client, {**DEFINITION, "systemPrompt": prompt}, HTTP_IF_MATCH=etag).status_code)

    threads = [threading.Thread(target=redefine, args=(p,)) for p in ("One.", "Two.")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(answers) == [200, 412]
    assert revisions() == [1, 2]


# --- who and from where ------------------------------------------------------------------------


def test_a_definition_through_the_api_records_the_key_by_its_name_never_its_secret(server, server_key):
    body = put(server).json()

    key = ApiKey.objects.get(label="server")
    assert body["revision"]["by"] == {"type": "apiKey", "name": "server", "key": f"sk_{key.prefix}"}
    assert body["revision"]["via"] == "api" and body["revision"]["at"]
    assert server_key.split("_", 2)[2] not in str(body)
    assert server.get(DM).json()["revision"] == body["revision"]


def test_a_key_without_a_label_is_named_by_its_role(api):
    body = put(api).json()

    assert body["revision"]["by"]["name"] == "designer"


def test_the_agents_list_carries_each_agents_newest_revision(server, django_assert_max_num_queries):
    put(server)
    put(server, CHANGED)
    put(server, name="ferryman")

    with django_assert_max_num_queries(4):
        agents = server.get("/api/v1/agents").json()["agents"]

    assert [(a["name"], a["revision"]["number"], a["revision"]["via"]) for a in agents] == [
        ("dm", 2, "api"),
        ("ferryman", 1, "api"),
    ]


def test_a_revision_written_before_provenance_was_recorded_is_unknown(server):
    put(server)
    AgentRevision.objects.update(via="unknown", by_name="", by_key="")

    revision = server.get(DM).json()["revision"]

    assert (revision["by"], revision["via"]) == (None, "unknown")


def test_a_revision_no_longer_kept_reads_as_unknown(server):
    put(server)
    AgentRevision.objects.all().delete()

    revision = server.get(DM).json()["revision"]

    assert revision == {"number": 1, "by": None, "via": "unknown", "at": None, "note": ""}


def test_a_fork_records_who_forked_and_copies_the_history_it_came_with(server, server_key):
    put(server)
    put(server, CHANGED)
    assert server.post(f"{DM}/messages", {"content": "Hello."}, format="json").status_code == 200

    forked = server.post(f"{DM}/fork", {"name": "dm-b", "atBlock": 1}, format="json")

    assert forked.status_code == 201, forked.content
    assert forked["ETag"] == '"3"'
    newest = forked.json()["revision"]
    assert (newest["number"], newest["via"], newest["by"]["name"]) == (3, "fork", "server")
    assert newest["note"] == "Forked from dm at block 1"
    listed = server.get("/api/v1/agents/dm-b/revisions").json()["revisions"]
    assert [(r["number"], r["via"], r["by"]) for r in listed[1:]] == [(2, "fork", None), (1, "fork", None)]
    assert listed[1]["note"] == "Revision 2 of dm"


def test_an_import_records_the_key_that_imported_it(admin_api, server):
    put(server)
    document = exported(server.get(f"{DM}/export"))

    imported = admin_api.post("/api/v1/agents/import", {**document, "name": "dm-copy"}, format="json")

    assert imported.status_code == 201, imported.content
    newest = imported.json()["revision"]
    assert (newest["via"], newest["by"]["name"], newest["by"]["type"]) == (
        "import",
        "first admin key",
        "apiKey",
    )
    assert newest["note"] == "Imported from a file posted to the API"
    first = server.get("/api/v1/agents/dm-copy/revisions/1").json()
    assert (first["via"], first["by"]) == ("import", None)


# --- the revisions ------------------------------------------------------------------------------


def test_the_revisions_are_listed_newest_first_in_the_list_shape(server):
    put(server)
    put(server, CHANGED)
    put(server)

    first = server.get(f"{DM}/revisions?limit=2").json()
    rest = server.get(f"{DM}/revisions?limit=2&cursor={first['nextCursor']}").json()

    assert [r["number"] for r in first["revisions"]] == [3, 2]
    assert [r["number"] for r in rest["revisions"]] == [1] and rest["nextCursor"] is None
    assert set(first["revisions"][0]) == {"number", "by", "via", "at", "note"}


def test_one_revision_answers_the_definition_it_set_as_a_put_takes_it(server):
    put(server, {**CHANGED, "compaction": {"type": "sliding-window", "maxTokens": 9000}})
    put(server)

    revision = server.get(f"{DM}/revisions/1").json()
    again = put(server, revision["definition"])

    assert revision["number"] == 1 and revision["via"] == "api"
    assert revision["definition"]["systemPrompt"] == "You are the ferryman."
    assert revision["definition"]["compaction"] == {"type": "sliding-window", "maxTokens": 9000}
    assert again.status_code == 200 and again.json()["systemPrompt"] == "You are the ferryman."


@pytest.mark.parametrize("number", ["7", "0", "x", "99999999999999999999", "1.5"])
def test_a_revision_there_is_not_is_404(server, number):
    put(server)

    response = server.get(f"{DM}/revisions/{number}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "revision_not_found"


@pytest.mark.parametrize("path", ["/revisions", "/revisions/1"])
def test_another_games_revisions_are_404_and_need_a_key(outsider, anonymous, server, path):
    put(server)

    assert outsider.get(DM + path).status_code == 404
    assert anonymous.get(DM + path).status_code == 401


@pytest.mark.parametrize("path", ["/revisions", "/revisions/1"])
def test_revisions_are_read_only(server, path):
    put(server)

    assert server.post(DM + path, {}, format="json").status_code == 405
    assert server.delete(DM + path).status_code == 405


def test_a_bad_cursor_is_400(server):
    put(server)

    response = server.get(f"{DM}/revisions?cursor=nonsense")

    assert response.status_code == 400


def _page_config(prompt: str) -> dict:
    return {
        "system_prompt": prompt,
        "model": "scripted",
        "memory_enabled": "on",
        "max_open_tokens": "4000",
        "compaction_type": "summarize",
        "max_tokens": "32000",
    }
