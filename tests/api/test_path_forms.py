"""What a URL carries is read in the one form the studio writes it, in
ASCII: a path parameter in any other form is a 404 (never a 500, never
another spelling of a real object), and a query parameter in any other
form a 400. Python reads far more than the studio writes — `int('١')` is
1, `'³'.isdigit()` is True while `int('³')` raises, `uuid.UUID` takes
braces, `urn:uuid:`, bare hex and any script's digits — and PostgreSQL
refuses a NUL in text outright. (The WebSockets' names: tests/live/test_consumers.py.)"""

import pytest
from django.test import Client

from ..conftest import error_of, page_user, quest_checkpoint

ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


@pytest.mark.parametrize(
    "path, code",
    [
        ("/api/v1/agents/%00", "agent_not_found"),
        ("/api/v1/agents/dm%00/history", "agent_not_found"),
        ("/api/v1/agents/%EF%BD%84%EF%BD%8D", "agent_not_found"),  # ｄｍ, fullwidth
        ("/api/v1/agents/dm/checkpoints/%C2%B3", "checkpoint_not_found"),  # ³
        ("/api/v1/agents/dm/checkpoints/%D9%A1", "checkpoint_not_found"),  # ١, checkpoint 1 in another script
        ("/api/v1/agents/dm/checkpoints/%EF%BC%91", "checkpoint_not_found"),  # １, fullwidth
        ("/api/v1/agents/dm/memories/quest%00/history", "memory_not_found"),
        ("/api/v1/agents/dm/replays/%D9%A1", "replay_not_found"),
    ],
    ids=[
        "nul-agent",
        "nul-in-agent",
        "fullwidth-agent",
        "superscript-checkpoint",
        "arabic-indic-checkpoint",
        "fullwidth-checkpoint",
        "nul-memory",
        "arabic-indic-replay",
    ],
)
def test_a_path_parameter_not_in_the_studios_form_is_a_404(api, agent, path, code):
    quest_checkpoint(agent, through=0)
    api.raise_request_exception = False

    response = api.get(path)

    assert response.status_code == 404
    assert error_of(response)["code"] == code


def test_the_studios_own_form_of_a_checkpoint_still_finds_it(api, agent):
    quest_checkpoint(agent, through=0)

    assert api.get("/api/v1/agents/dm/checkpoints/1").status_code == 200


@pytest.mark.parametrize(
    "spelling",
    [
        str.upper,
        lambda id: id.replace("-", ""),
        lambda id: "{" + id + "}",
        lambda id: "urn:uuid:" + id,
        lambda id: id.translate(ARABIC_INDIC),
    ],
    ids=["upper-case", "no-hyphens", "braces", "urn", "arabic-indic-digits"],
)
def test_another_spelling_of_a_turns_id_is_a_404(api, agent, send, spelling):
    turn = send("hello")
    assert api.get(f"/api/v1/agents/dm/turns/{turn['id']}").status_code == 200

    response = api.get(f"/api/v1/agents/dm/turns/{spelling(turn['id'])}")

    assert response.status_code == 404
    assert error_of(response)["code"] == "turn_not_found"


@pytest.mark.parametrize(
    "path, field",
    [
        ("/api/v1/agents?limit=%EF%BC%91%EF%BC%90", "limit"),  # １０
        ("/api/v1/agents?limit=1_0", "limit"),
        ("/api/v1/agents?limit=%2010", "limit"),
        ("/api/v1/agents/dm/context?atBlock=%D9%A1", "atBlock"),
        ("/api/v1/agents/dm/context?atBlock=%C2%B3", "atBlock"),
        ("/api/v1/agents/dm/history?after=1_0", "after"),
        ("/api/v1/agents/dm/memories?atBlock=%D9%A1", "atBlock"),
        ("/api/v1/billing/lines?before=%D9%A1", "before"),
        ("/api/v1/billing/lines?turn=" + "1" * 32, "turn"),
        ("/api/v1/billing/lines?turn=" + "%D9%A1" * 32, "turn"),
    ],
)
def test_a_query_parameter_not_in_the_studios_form_is_a_400_naming_it(api, agent, path, field):
    response = api.get(path)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert [d["field"] for d in error["details"]] == [field]


@pytest.mark.parametrize(
    "path",
    [
        "/studio/ashmere/agents/%00/",
        "/studio/ashmere/agents/%00/memories/",
        "/studio/ashmere/agents/dm%00/blocks/1/",
    ],
)
def test_a_page_for_a_name_not_in_the_studios_form_is_a_404(game, agent, path):
    client = Client(raise_request_exception=False)
    client.force_login(page_user("mara", game))

    assert client.get(path).status_code == 404


def test_the_billing_pages_turn_filter_takes_a_turn_id_only_as_the_studio_writes_it(game, agent, send):
    turn = send("hello")
    client = Client()
    client.force_login(page_user("ines", game, role="admin"))

    written = client.get(f"/studio/ashmere/billing/?turn={turn['id']}")
    bare = client.get(f"/studio/ashmere/billing/?turn={turn['id'].replace('-', '')}")

    assert "That is not a turn id" not in written.content.decode()
    assert "That is not a turn id" in bare.content.decode()
